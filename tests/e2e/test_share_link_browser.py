"""The share link's copy button (issue 24): the link is shown as text with a "Copy link" button beside it; a click
puts exactly that link on the clipboard (the button's script holds no data: it copies the text beside it), and the
link opens the same view. Screenshot: test-artifacts/share-link.png."""
from __future__ import annotations

from playwright.sync_api import expect


def test_copy_link_puts_the_views_link_on_the_clipboard(browser, app_url, artifacts, wait):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=app_url)
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        page.goto(f"{app_url}/?model=qwen2.5-7b&tp=2&seq=8192&v=1")
        wait(page)
        box = page.locator(".share-link")
        expect(box).to_have_count(1)
        link = box.locator("code").inner_text().strip()
        assert "model=qwen2.5-7b" in link and "tp=2" in link and "seq=8192" in link
        button = box.get_by_role("button", name="Copy link")
        button.scroll_into_view_if_needed()
        button.click()
        expect(box.locator("button")).to_have_text("Copied")
        assert page.evaluate("navigator.clipboard.readText()") == link
        box.screenshot(path=artifacts / "share-link.png")
    finally:
        context.close()
