"""The hand-over of pages listed ahead (:mod:`shared.client.early.pages`), between a thread and a reader, no cluster.

A page is handed only to the request it answers, once, in order; anything else is left to kube-apiserver, and what
nobody takes is dropped.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from shared.client.early.pages import Pages

KEY = ("/apis/infra.contrib.fluxcd.io/v1alpha2/terraforms", "kind=A")


def listed(pages: Pages, key: tuple[str, str] = KEY, count: int = 3) -> None:
    """The lister's side of a list of ``count`` pages, all put at once and ended."""
    assert pages.plan([key]) == [key]
    assert pages.begin(key)
    for index in range(count):
        token = None if index == 0 else f"t{index}"
        assert pages.put(key, token, f"page{index}".encode(), f"t{index + 1}" if index + 1 < count else None)
    pages.end(key)


async def test_pages_are_handed_in_order_once_and_a_relist_goes_to_kube_apiserver() -> None:
    pages = Pages()
    listed(pages)
    assert [await pages.take(*KEY, token) for token in (None, "t1", "t2")] == [b"page0", b"page1", b"page2"]
    assert pages.handed(*KEY) == 3
    assert await pages.take(*KEY, None) is None  # the same list again: asked of kube-apiserver


async def test_a_reader_that_starts_over_is_not_handed_the_rest() -> None:
    pages = Pages()
    listed(pages)
    assert await pages.take(*KEY, None) == b"page0"
    assert await pages.take(*KEY, None) is None  # a restart after the first page (a 410, say)
    assert await pages.take(*KEY, "t1") is None  # and the stream it left is gone for good


async def test_a_page_is_handed_only_to_the_list_it_answers() -> None:
    pages = Pages()
    listed(pages)
    assert await pages.take(KEY[0], "kind=B", None) is None
    assert await pages.take("/api/v1/namespaces/x/secrets", KEY[1], None) is None
    assert await pages.take(*KEY, "t1") is None  # a token out of order drops the stream
    assert await pages.take(*KEY, None) is None


async def test_a_reader_waits_for_a_page_still_being_listed() -> None:
    pages = Pages()
    pages.plan([KEY])
    pages.begin(KEY)

    def lister() -> None:
        time.sleep(0.2)
        pages.put(KEY, None, b"late", None)
        pages.end(KEY)

    thread = threading.Thread(target=lister)
    thread.start()
    started = time.monotonic()
    assert await pages.take(*KEY, None) == b"late"
    assert time.monotonic() - started >= 0.15
    thread.join()


async def test_a_page_the_lister_never_got_is_asked_of_kube_apiserver_with_the_same_token() -> None:
    pages = Pages()
    pages.plan([KEY])
    pages.begin(KEY)
    pages.put(KEY, None, b"first", "t1")
    pages.end(KEY)  # the lister failed before the second page
    assert await pages.take(*KEY, None) == b"first"
    assert await pages.take(*KEY, "t1") is None


async def test_a_list_asked_for_before_the_lister_began_it_is_not_listed_ahead() -> None:
    pages = Pages()
    assert await pages.take(*KEY, None) is None  # the reader came before the plan
    assert pages.plan([KEY]) == []
    other = (KEY[0], "kind=B")
    assert pages.plan([other]) == [other]
    assert await pages.take(*other, None) is None  # planned, not begun: the reader lists it itself
    assert not pages.begin(other)


async def test_a_stream_whose_reader_does_not_come_is_dropped_and_its_lister_stops() -> None:
    pages = Pages(max_ahead=10, stall=0.2)
    pages.plan([KEY])
    pages.begin(KEY)
    assert pages.put(KEY, None, b"x" * 10, "t1")
    started = time.monotonic()
    assert not pages.put(KEY, "t1", b"y", None)  # full: waited for a reader, then gave up
    assert time.monotonic() - started >= 0.15
    assert await pages.take(*KEY, None) is None


async def test_a_full_stream_goes_on_as_its_reader_takes() -> None:
    pages = Pages(max_ahead=10, stall=5)
    pages.plan([KEY])
    pages.begin(KEY)
    assert pages.put(KEY, None, b"x" * 10, "t1")
    put: list[bool] = []
    thread = threading.Thread(target=lambda: put.append(pages.put(KEY, "t1", b"y", None)))
    thread.start()
    await asyncio.sleep(0.1)
    assert not put  # held back while the stream is full
    assert await pages.take(*KEY, None) == b"x" * 10
    thread.join(timeout=5)
    assert put == [True]
    assert await pages.take(*KEY, "t1") == b"y"


async def test_closing_drops_what_nobody_took_and_then_nothing_is_kept() -> None:
    pages = Pages(stall=0.2)
    listed(pages)
    started = time.monotonic()
    pages.close()
    assert time.monotonic() - started >= 0.15  # it waited for a reader first
    assert await pages.take(*KEY, None) is None
    assert pages.plan([(KEY[0], "kind=C")]) == []


def test_closing_waits_for_the_reader_to_take_what_is_held() -> None:
    pages = Pages(stall=5)
    listed(pages, count=2)
    closed = threading.Event()
    thread = threading.Thread(target=lambda: (pages.close(), closed.set()))
    thread.start()
    time.sleep(0.1)
    assert not closed.is_set()
    got = asyncio.run(_take_all(pages))
    thread.join(timeout=5)
    assert closed.is_set() and got == [b"page0", b"page1"]


async def _take_all(pages: Pages) -> list[bytes | None]:
    return [await pages.take(*KEY, None), await pages.take(*KEY, "t1")]


@pytest.mark.parametrize("state", ["pending", "listing"])
async def test_a_reader_never_waits_on_a_stream_it_dropped(state: str) -> None:
    pages = Pages()
    pages.plan([KEY])
    if state == "listing":
        pages.begin(KEY)
    assert await pages.take(*KEY, "t5") is None
    assert await asyncio.wait_for(pages.take(*KEY, None), 1) is None


async def test_a_reader_stops_waiting_for_a_lister_that_makes_no_progress() -> None:
    pages = Pages(stall=0.2)
    pages.plan([KEY])
    pages.begin(KEY)
    started = time.monotonic()
    assert await pages.take(*KEY, None) is None  # nothing came within the stall: the reader asks kube-apiserver
    assert 0.15 <= time.monotonic() - started < 2
    assert not pages.put(KEY, None, b"too late", None)  # and the lister stops listing it
