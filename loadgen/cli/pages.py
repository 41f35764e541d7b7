"""Pointing the user at a page a command wrote (report.html, compare.html): its file URL,
printed on a line of its own (never wrapped, so it stays clickable and copyable), and with
``--open`` the page opened in a browser where one exists (``webbrowser``)."""

from __future__ import annotations

import webbrowser
from pathlib import Path

import click


def page_url(path: Path) -> str:
    """``path`` as a ``file://`` URL (absolute, percent-encoded)."""
    return path.resolve().as_uri()


def show_page(label: str, path: Path, open_it: bool = False) -> None:
    """Print ``LABEL: file://…`` for ``path``; with ``open_it``, open it in the browser
    ``webbrowser`` finds (``$BROWSER`` first), or say in one line that there is none (the URL
    above is then the way to it). Never raises for a missing or failing browser."""
    url = page_url(path)
    click.echo(f"{label}: {url}")
    if not open_it:
        return
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        click.echo("no browser found on this machine: open the URL above in one", err=True)
        return
    try:
        opened = browser.open(url)
    except OSError as exc:
        opened = False
        click.echo(f"the browser could not be started ({exc})", err=True)
    if not opened:
        click.echo("the browser did not open the page: open the URL above in one", err=True)
