"""The web console served at /console (service/console/routes.py)."""
