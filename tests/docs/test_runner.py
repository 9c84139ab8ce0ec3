"""How the example runner reads a page (tests/docs/examples.py), without a server."""

from __future__ import annotations

from .examples import blocks_of

PAGE = """# A page

```python
a = 1
```

```console
$ fencing status
```

1. A step:

    ```python
    b = a + 1
    ```

<!-- example: skip — needs a Kafka -->

```python
raise SystemExit
```

```python title="conftest.py"
pytest_plugins = []
```

~~~python title="tests/test_orders.py"
def test_x(): ...
~~~

```python title="settings.py"
c = 3
```

<!-- example: skip -->
```python
d = 4
```
"""


def test_python_blocks_are_found_in_order_with_their_text_relative_to_the_fence() -> None:
    blocks = blocks_of("how-to/x.md", PAGE)
    assert [b.id for b in blocks] == [f"how-to/x.md::block{i}" for i in range(1, 8)]
    assert [b.code for b in blocks[:2]] == ["a = 1\n", "b = a + 1\n"]
    assert blocks[0].line == 3


def test_a_skip_marker_before_a_block_skips_it_with_its_reason() -> None:
    blocks = blocks_of("p.md", PAGE)
    assert [b.skip for b in blocks][:6] == [None, None, "needs a Kafka", None, None, None]
    assert blocks[6].skip is not None


def test_a_title_ending_in_a_pytest_file_name_makes_a_test_file() -> None:
    blocks = blocks_of("p.md", PAGE)
    assert [b.test_file for b in blocks] == [None, None, None, None, "test_orders.py", None, None]
    assert blocks[5].title == "settings.py"


def test_a_block_titled_conftest_goes_with_the_pages_pytest_files() -> None:
    blocks = blocks_of("p.md", PAGE)
    assert [b.conftest for b in blocks] == [False, False, False, True, False, False, False]
