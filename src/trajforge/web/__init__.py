"""The web UI: browse, search, compare and diff runs, fork trees, tokens, live sessions,
training progress.

`create_app(UiConfig(db=...))` gives the FastAPI app; `trajforge ui` serves it. Pages are
rendered on the server (`runs`, `run_view`, `forks`, `tokens`, `compare`, `live`,
`datasets`, `training`), with a little JavaScript in `static/app.js` for live updates; plots
are inline SVG (`plots`). The JSON API (`/api/runs`, `/api/runs/{id}`, `/api/runs/{id}/tree`,
`/api/diff`, `/api/events`, `/api/training`) answers scripts and the pages alike.
"""

from trajforge.web.app import UiConfig, create_app

__all__ = ["UiConfig", "create_app"]
