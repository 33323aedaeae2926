"""The rejoin wait's bookkeeping (service/rejoin.py), clock passed in: what a batch waits for,
until when, and the back-off after waits in vain."""

from service.rejoin import BACKOFF, SHARE, RejoinWait


def test_a_batch_waits_for_the_answered_and_the_queued_texts_within_its_window():
    rejoin = RejoinWait(max_s=0.010, max_texts=64)
    rejoin.after_batch(answered=8, queued=8, encoding_s=0.020, now=100.0)
    assert rejoin.expected == 16
    assert rejoin.until == 100.0 + SHARE * 0.020  # the share binds below max_s
    assert rejoin.waits(15) and not rejoin.waits(16)
    rejoin.after_batch(answered=60, queued=30, encoding_s=1.0, now=200.0)
    assert rejoin.expected == 64  # never more than a batch holds
    assert rejoin.until == 200.010  # max_s binds


def test_a_lone_client_never_waits_and_zero_turns_it_off():
    rejoin = RejoinWait(max_s=0.010, max_texts=64)
    rejoin.after_batch(answered=1, queued=0, encoding_s=0.020, now=0.0)
    assert not rejoin.waits(1)  # its next text is all the batch waits for
    off = RejoinWait(max_s=0.0, max_texts=64)
    off.after_batch(answered=8, queued=8, encoding_s=0.020, now=0.0)
    assert not off.waits(8)


def test_waits_in_vain_back_off_and_a_wait_that_fills_up_resets():
    rejoin = RejoinWait(max_s=0.010, max_texts=64)
    skipped = []
    for _ in range(len(BACKOFF) + 1):
        rejoin.after_batch(answered=4, queued=0, encoding_s=0.1, now=0.0)
        assert rejoin.settle(2) == "in_vain"
        batches = 0
        while True:  # batches after which it does not wait
            rejoin.after_batch(answered=4, queued=0, encoding_s=0.1, now=0.0)
            if rejoin.waits(0):
                break
            batches += 1
        skipped.append(batches)
    assert skipped == [*BACKOFF, BACKOFF[-1]]
    assert rejoin.settle(4) == "back"
    rejoin.after_batch(answered=4, queued=0, encoding_s=0.1, now=0.0)
    assert rejoin.waits(0)  # no back-off after a wait that filled up
