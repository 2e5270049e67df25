from burrow.common.limits import ConnectionCaps, TokenBucket


def test_connection_caps_total_and_per_ip():
    caps = ConnectionCaps(max_total=3, max_per_ip=2)
    assert caps.try_acquire("a") is None
    assert caps.try_acquire("a") is None
    assert caps.try_acquire("a") == "per_ip"
    assert caps.try_acquire("b") is None
    assert caps.try_acquire("c") == "total"
    caps.release("a")
    assert caps.held_by("a") == 1
    assert caps.try_acquire("c") is None


def test_unlimited_when_zero():
    caps = ConnectionCaps()
    for _ in range(1000):
        assert caps.try_acquire("x") is None


def test_token_bucket_refills_with_time():
    bucket = TokenBucket(rate=10, burst=5, now=0.0)
    assert all(bucket.take(1, 0.0) for _ in range(5))
    assert not bucket.take(1, 0.0)
    assert bucket.take(1, 0.1)
    assert not bucket.take(5, 0.2)
    assert bucket.take(5, 1.0)
