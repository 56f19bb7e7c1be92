"""The dependency of dns_app.py: answers every GET with a small JSON body.
Usage: dns_api.py PORT"""
import sys

from jsonhttp import JsonHandler, serve


class Handler(JsonHandler):
    def do_GET(self):
        self.answer(b'{"price": 7}')


serve(int(sys.argv[1]), Handler)
