#!/usr/bin/python3
"""Arm a scan on an h5ingest scan service, wait for it, print its files.

Standard library only, so that a Bluesky plan, an ophyd device or any
control-system script can use it (or copy its three calls):

    POST /v1/scans                      arm (201; 409 if a scan runs)
    GET  /v1/scans/{id}/wait?timeout=S  long poll until the scan ends
    POST /v1/scans/{id}/stop            drain and end (cancel: close now)

    client.py --url http://127.0.0.1:8642 --profile pimega-135d \\
        --scan-id s0042 --darks 20 --flats 20 --projections 1800 \\
        --title "gold foam" --sample Au --meta proposal=20261234

It prints each file's path and exits 0 when every planned frame is good, 3
when the scan ended with frames missing, corrupt or rejected, 1 when it
failed, 2 when the service refused the request.
"""
import argparse
import json
import sys
import urllib.error
import urllib.request


class Service:
    """A client of the scan service's /v1 API."""

    def __init__(self, url, token=None):
        self.url = url.rstrip("/")
        self.token = token

    def call(self, method, path, body=None, timeout=60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None or method == "POST":
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.load(resp)

    def arm(self, **request):
        return self.call("POST", "/v1/scans", request)

    def wait(self, scan_id, timeout=30):
        """Wait until the scan ends; returns its status."""
        while True:
            st = self.call("GET", f"/v1/scans/{scan_id}/wait?timeout={timeout}", timeout=timeout + 30)
            if st["state"] in ("done", "incomplete", "cancelled", "failed"):
                return st

    def stop(self, scan_id):
        return self.call("POST", f"/v1/scans/{scan_id}/stop")

    def cancel(self, scan_id):
        return self.call("POST", f"/v1/scans/{scan_id}/cancel")


def typed(value):
    """A --set VALUE: JSON where it parses (numbers, true), else text."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8642")
    ap.add_argument("--token", help="the service's token, when it has one")
    ap.add_argument("--profile", required=True)
    ap.add_argument("--scan-id", required=True)
    ap.add_argument("--darks", type=int, default=0)
    ap.add_argument("--flats", type=int, default=0)
    ap.add_argument("--projections", type=int, default=0)
    ap.add_argument("--title", default="")
    ap.add_argument("--sample", default="")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a profile key a request may set over the profile, e.g. output.compression=lz4; a VALUE that is JSON keeps its type")
    ap.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--timeout", type=float, default=30, help="seconds per long poll")
    args = ap.parse_args()

    request = {"profile": args.profile, "scan_id": args.scan_id}
    plan = {k: v for k, v in (("darks", args.darks), ("flats", args.flats), ("projections", args.projections)) if v}
    if plan:
        request["plan"] = plan
    if args.title:
        request["title"] = args.title
    if args.sample:
        request["sample"] = args.sample
    if args.meta:
        request["user_metadata"] = dict(m.split("=", 1) for m in args.meta)
    for s in args.set:
        key, value = s.split("=", 1)
        section, _, name = key.partition(".")  # output.level: {"output": {"level": ...}}
        request.setdefault("overrides", {}).setdefault(section, {})[name] = typed(value)

    svc = Service(args.url, args.token)
    try:
        svc.arm(**request)
    except urllib.error.HTTPError as e:
        problem = json.load(e)
        print(f"refused ({e.code}): {problem.get('detail')}", file=sys.stderr)
        for err in problem.get("errors") or []:
            print(f"  {err.get('location', '')} {err.get('message')}", file=sys.stderr)
        return 2
    st = svc.wait(args.scan_id, args.timeout)
    for f in st["files"]:
        print(f["path"])
    if st["state"] == "failed":
        print(f"failed: {st.get('error')}", file=sys.stderr)
        return 1
    return 0 if st["state"] == "done" else 3


if __name__ == "__main__":
    sys.exit(main())
