"""calculator/core/bounded_cache.py: a value is built once per key, and the cache never holds more than its limit."""
from calculator.core.bounded_cache import get_or_build


def test_a_value_is_built_once_and_the_oldest_goes_first():
    cache: dict = {}
    builds = []

    def build(k):
        return lambda: builds.append(k) or k * 10
    assert [get_or_build(cache, k, build(k), 3) for k in (1, 2, 1, 3)] == [10, 20, 10, 30]
    assert builds == [1, 2, 3]
    assert get_or_build(cache, 4, build(4), 3) == 40
    assert list(cache) == [2, 3, 4]  # 1 was the oldest entry
