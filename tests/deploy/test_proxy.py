"""deploy/nginx.conf against the API it fronts: read as files, so no compose tool is needed."""

import re

from core.settings import REPO_ROOT, Settings

NGINX = REPO_ROOT / "deploy" / "nginx.conf"


def test_proxy_drops_idle_upstream_connections_before_the_api_closes_them():
    """Otherwise nginx may send a POST into a connection the API is closing: a 502."""
    timeouts = re.findall(r"^\s*keepalive_timeout\s+(\d+)s;", NGINX.read_text(), flags=re.MULTILINE)
    lines = (REPO_ROOT / "deploy" / "rankserve.env").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    default = Settings.model_fields["keep_alive_timeout_s"].default
    api = float(env.get("RANKSERVE_KEEP_ALIVE_TIMEOUT_S", default))
    assert len(timeouts) == 1 and int(timeouts[0]) < api
