"""A minimal WSGI app for serving tests of the gunicorn configuration (no Django, no database)."""


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]
