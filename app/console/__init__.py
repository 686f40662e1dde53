"""The provider console: server-rendered pages at `{admin.prefix}/console` over the same
services as the admin API (sharing.shares.admin, the recipient repository, the audit
store, app.issuing). See app.console.pages."""

from app.console.pages import build_console

__all__ = ["build_console"]
