"""A stand-in for Neutron: every GET of a collection answers an empty list.

Nova needs a network service even for servers booted with `networks='none'`: it lists the
server's ports and security groups when showing, migrating and deleting it (without an answer
GET /servers/{id} fails with 500 and a live migration ends in ERROR). Nova sends only GETs when
no port exists, so this answers `{"<collection>": []}` to them, 404 to a GET of one item and to
anything else. docs/openstack.md says why Neutron itself is not run.
"""

import json
import re

_ITEM = re.compile(r"^[0-9a-fA-F-]{32,36}$")


def _answer(start_response, status, body):
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def application(environ, start_response):
    path = environ.get("PATH_INFO", "/").rstrip("/")
    parts = [p for p in path.split("/") if p]
    if environ.get("REQUEST_METHOD") != "GET":
        return _answer(start_response, "404 Not Found", {"NeutronError": {"message": "stand-in"}})
    if not parts:
        version = {"id": "v2.0", "status": "CURRENT", "links": [{"rel": "self", "href": "/v2.0/"}]}
        return _answer(start_response, "200 OK", {"versions": [version]})
    last = parts[-1].removesuffix(".json")
    if _ITEM.match(last):
        return _answer(start_response, "404 Not Found", {"NeutronError": {"message": "not found"}})
    if last == "v2.0":
        return _answer(start_response, "200 OK", {"resources": []})
    return _answer(start_response, "200 OK", {last.replace("-", "_"): []})
