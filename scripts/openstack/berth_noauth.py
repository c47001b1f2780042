"""A paste filter for nova-api without Keystone: the token names the caller.

Nova 34 has only Keystone pipelines; scripts/openstack/stack.py swaps `authtoken` for this
filter. A token `user[:project]` becomes the identity headers Nova's own `keystonecontext`
reads; the user `admin` gets the admin role, everyone else member and reader. Only for the
test stack: anyone who can reach the port is whoever they say.
"""


class NoAuth:
    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        token = environ.get("HTTP_X_AUTH_TOKEN") or "admin"
        user, _, project = token.partition(":")
        project = project or user
        environ["HTTP_X_AUTH_TOKEN"] = token
        environ["HTTP_X_USER_ID"] = user
        environ["HTTP_X_USER_NAME"] = user
        environ["HTTP_X_PROJECT_ID"] = project
        environ["HTTP_X_PROJECT_NAME"] = project
        environ["HTTP_X_ROLES"] = "admin,member,reader" if user == "admin" else "member,reader"
        environ["HTTP_X_IDENTITY_STATUS"] = "Confirmed"
        return self.app(environ, start_response)


def filter_factory(global_conf, **local_conf):
    return NoAuth
