"""The operator dashboard served by `berth serve` under `/dashboard` (docs/dashboard.md).

Server-rendered pages (Jinja2 templates) that update themselves from the event log through
server-sent events; charts by Chart.js, installed from npm (`package.json` at the repository's
root) and served from `node_modules`. The same tokens and roles as the API: the login form keeps
the token in an HttpOnly cookie that `session` checks with the service's `Authenticator`.
"""
