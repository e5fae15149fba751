#!/usr/bin/python3
"""A client of the h5ingest scan service: arm and wait, follow, status, profiles.

Standard library only. Its Service class is what an ophyd-async device or
a Bluesky plan wraps (arm in the device's prepare/kickoff, wait or follow
in complete, stop and cancel in stop, status for its readbacks); any
control-system script can use it, or copy its calls:

    POST /v1/scans                      arm (201; 409 if a scan runs)
    GET  /v1/scans/{id}/wait?timeout=S  long poll until the scan ends
    POST /v1/scans/{id}/stop            drain and end (cancel: close now)
    GET  /v1/events                     server-sent events, resumed with Last-Event-ID
    GET  /v1/status, /v1/health         the service's state, rates, free space
    GET  /v1/profiles[/NAME]            the profiles an arm may name
    GET  /v1/scans/{id}/preview.png     the scan's latest image

Commands (arm is the default: the options alone arm):

    client.py arm --url http://127.0.0.1:8642 --profile pimega-135d-tomo \\
        --scan-id s0042 --darks 20 --flats 20 --projections 1800 \\
        --title "gold foam" --sample Au --experiment-id 20261234 --meta proposal=20261234
    client.py status                    the service's status, as JSON
    client.py health                    exit 0 when healthy, 1 when not
    client.py profiles [NAME]           the profiles, or one merged with where each value came from
    client.py follow [--scan-id ID]     the events, one JSON line each, until that scan ends
    client.py preview --scan-id ID -o latest.png

arm prints each file's path and exits 0 when every planned frame is good, 3
when the scan ended with frames missing, corrupt or rejected, 1 when it
failed, 2 when the service refused the request.

The token of a service that has one comes from a file (--token-file PATH,
its first line, as serve --token-file reads it) or from the environment
(H5INGEST_TOKEN) rather than from the command line (--token), where other
users of the host see it (ps, /proc/PID/cmdline, shell history).
--token-file wins over the environment.
"""
import argparse
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.request

ENDED = ("done", "incomplete", "cancelled", "failed")

TOKEN_ENV = "H5INGEST_TOKEN"


class TokenError(Exception):
    """A token that cannot be read or used."""


def read_token(path=None, environ=None):
    """The service's token: the first line of the file at path, else the
    H5INGEST_TOKEN environment variable, else None. Surrounding white space
    and a UTF-8 byte order mark are dropped, as serve drops them."""
    environ = os.environ if environ is None else environ
    if path:
        try:
            with open(path, encoding="utf-8-sig") as f:
                token = f.readline(4096)
        except (OSError, UnicodeDecodeError) as e:
            raise TokenError(f"token file {path}: {e}") from e
        where = f"token file {path}"
    elif environ.get(TOKEN_ENV):
        token, where = environ[TOKEN_ENV].lstrip("\ufeff"), TOKEN_ENV
    else:
        return None
    token = token.strip()
    if not token:
        raise TokenError(f"{where} holds no token")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise TokenError(f"{where}: the token holds a space or a control character")
    return token


class Service:
    """A client of the scan service's /v1 API."""

    def __init__(self, url, token=None):
        self.url = url.rstrip("/")
        self.token = token

    def request(self, method, path, body=None, accept="application/json"):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", accept)
        if data is not None or method == "POST":
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        return req

    def call(self, method, path, body=None, timeout=60):
        with urllib.request.urlopen(self.request(method, path, body), timeout=timeout) as resp:
            return json.load(resp)

    def arm(self, **request):
        return self.call("POST", "/v1/scans", request)

    def wait(self, scan_id, timeout=30):
        """Wait until the scan ends; returns its status."""
        while True:
            st = self.call("GET", f"/v1/scans/{scan_id}/wait?timeout={timeout}", timeout=timeout + 30)
            if st["state"] in ENDED:
                return st

    def scan(self, scan_id):
        """The scan's status now."""
        return self.call("GET", f"/v1/scans/{scan_id}")

    def stop(self, scan_id):
        return self.call("POST", f"/v1/scans/{scan_id}/stop")

    def cancel(self, scan_id):
        return self.call("POST", f"/v1/scans/{scan_id}/cancel")

    def status(self):
        """The service's state (idle, armed, running, stopping, error), version,
        current scan with its counts and rates, last error and free space."""
        return self.call("GET", "/v1/status")

    def health(self):
        """(healthy, answer): the answer lists the problems when not healthy."""
        try:
            return True, self.call("GET", "/v1/health")
        except urllib.error.HTTPError as e:
            if e.code != 503:
                raise
            return False, json.load(e)

    def version(self):
        return self.call("GET", "/v1/version")

    def profiles(self):
        """The profiles an arm may name."""
        return self.call("GET", "/v1/profiles")["profiles"]

    def profile(self, name):
        """A profile merged, each key with its value and where it came from."""
        return self.call("GET", f"/v1/profiles/{name}")

    def preview(self, scan_id, max_side=0):
        """The scan's latest image as PNG bytes."""
        req = self.request("GET", f"/v1/scans/{scan_id}/preview.png?max_side={max_side}", accept="image/png")
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.read()

    def events(self, last_event_id=None, read_timeout=60, max_failures=10):
        """Yield (id, name, data) for each server-sent event, for ever.

        An id is text, EPOCH-N: the run of the service and the event's
        number in it. A dropped connection is made again after the delay the
        service asks (retry:), with the id of the last event seen as
        Last-Event-ID, so that the events in between come first: none is
        lost while the service keeps it. A service restarted since sends
        every event it keeps, after a comment saying so, which goes to
        stderr. The service sends a comment every 15 s while no event comes,
        so read_timeout (s) is a dead connection's. Gives up after
        max_failures connections in a row that fail."""
        retry, failures = 1.0, 0
        while True:
            req = self.request("GET", "/v1/events", accept="text/event-stream")
            if last_event_id is not None:
                req.add_header("Last-Event-ID", str(last_event_id))
            try:
                with urllib.request.urlopen(req, timeout=read_timeout) as resp:
                    failures = 0
                    fields = {}
                    for raw in resp:
                        line = raw.decode("utf-8").rstrip("\r\n")
                        if not line:
                            if "data" in fields:
                                if "id" in fields:
                                    last_event_id = fields["id"]
                                yield last_event_id, fields.get("event", "message"), json.loads(fields["data"])
                            fields = {}
                            continue
                        if line.startswith(":"):
                            comment = line[1:].strip()
                            if comment and comment != "keep-alive":
                                print(f"service: {comment}", file=sys.stderr)
                            continue
                        name, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if name == "retry" and value.isdigit():
                            retry = int(value) / 1000
                        elif name == "data" and "data" in fields:
                            fields["data"] += "\n" + value
                        elif name in ("id", "event", "data"):
                            fields[name] = value
            except urllib.error.HTTPError:
                raise
            except (urllib.error.URLError, http.client.HTTPException, OSError):
                failures += 1
                if failures >= max_failures:
                    raise
            time.sleep(retry)


def typed(value):
    """A --set or --meta VALUE: JSON where it parses (numbers, true, objects), else text."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def pairs(items, what):
    """KEY=VALUE items as (key, typed value)."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{what} {item!r}: want KEY=VALUE")
        out.append((key, typed(value)))
    return out


def refused(e):
    """Print a refusal of the service; returns arm's exit status for it."""
    try:
        problem = json.load(e)
    except ValueError:
        problem = {}
    print(f"refused ({e.code}): {problem.get('detail', e.reason)}", file=sys.stderr)
    for err in problem.get("errors") or []:
        print(f"  {err.get('location', '')} {err.get('message')}", file=sys.stderr)
    return 2


def cmd_arm(svc, args):
    request = {"profile": args.profile, "scan_id": args.scan_id}
    plan = {k: v for k, v in (("darks", args.darks), ("flats", args.flats), ("projections", args.projections)) if v}
    if plan:
        request["plan"] = plan
    for key, value in (("title", args.title), ("sample", args.sample), ("experiment_identifier", args.experiment_id)):
        if value:
            request[key] = value
    if args.meta:
        request["user_metadata"] = dict(pairs(args.meta, "--meta"))
    for key, value in pairs(args.set, "--set"):
        section, _, name = key.partition(".")  # output.level: {"output": {"level": ...}}
        request.setdefault("overrides", {}).setdefault(section, {})[name] = value
    try:
        svc.arm(**request)
    except urllib.error.HTTPError as e:
        return refused(e)
    st = svc.wait(args.scan_id, args.timeout)
    for f in st["files"]:
        print(f["path"])
    if st["state"] == "failed":
        print(f"failed: {st.get('error')}", file=sys.stderr)
        return 1
    return 0 if st["state"] == "done" else 3


def cmd_status(svc, args):
    print(json.dumps(svc.status(), indent=2))
    return 0


def cmd_health(svc, args):
    healthy, answer = svc.health()
    print(json.dumps(answer))
    return 0 if healthy else 1


def cmd_profiles(svc, args):
    if args.name:
        try:
            p = svc.profile(args.name)
        except urllib.error.HTTPError as e:
            return refused(e)
        width = max(len(k["key"]) for k in p["keys"])
        vwidth = max(len(k["value"]) for k in p["keys"])
        for k in p["keys"]:
            source = k["from"] + ("; one of " + ", ".join(k["one_of"]) if k.get("one_of") else "")
            print(f"{k['key']:<{width}}  {k['value']:<{vwidth}}  # {source}")
        return 0
    for p in svc.profiles():
        note = f"  ({p['error']})" if p.get("error") else ""
        print(f"{p['name']}\t{p['source']}\t{p.get('description', '')}{note}")
    return 0


def cmd_follow(svc, args):
    if args.scan_id and args.last_event_id is None:
        # A scan that has already ended sends no more events: say how it
        # ended rather than wait for them.
        try:
            st = svc.scan(args.scan_id)
        except urllib.error.HTTPError as e:
            if e.code != 404:  # not armed yet: follow until it is and ends
                return refused(e)
        else:
            if st["state"] in ENDED:
                event = "failed" if st["state"] == "failed" else "done"
                print(json.dumps({"id": None, "event": event, "data": st}), flush=True)
                return 0 if st["state"] == "done" else 3
    seen = 0
    for event_id, name, data in svc.events(args.last_event_id):
        print(json.dumps({"id": event_id, "event": name, "data": data}), flush=True)
        seen += 1
        if args.count and seen >= args.count:
            return 0
        if args.scan_id and name in ("done", "failed") and data.get("scan_id") == args.scan_id:
            return 0 if data.get("state") == "done" else 3


def cmd_preview(svc, args):
    try:
        png = svc.preview(args.scan_id, args.max_side)
    except urllib.error.HTTPError as e:
        return refused(e)
    with open(args.output, "wb") as f:
        f.write(png)
    print(args.output)
    return 0


COMMANDS = ("arm", "status", "health", "profiles", "follow", "preview")


def main(argv):
    if not argv or argv[0] not in COMMANDS + ("-h", "--help"):
        argv = ["arm"] + argv  # the options alone arm, as they always did
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default="http://127.0.0.1:8642")
    common.add_argument("--token-file", metavar="PATH",
                        help=f"file whose first line is the service's token, when it has one (else ${TOKEN_ENV})")
    common.add_argument("--token", help="the token itself: seen by every user of the host (ps), so prefer --token-file or $" + TOKEN_ENV)
    sub = ap.add_subparsers(dest="command", required=True)

    arm = sub.add_parser("arm", parents=[common], help="arm a scan, wait for it, print its files")
    arm.add_argument("--profile", required=True, help="a built-in profile or a file of the service's --profiles, without .yaml")
    arm.add_argument("--scan-id", required=True)
    arm.add_argument("--darks", type=int, default=0)
    arm.add_argument("--flats", type=int, default=0)
    arm.add_argument("--projections", type=int, default=0)
    arm.add_argument("--title", default="")
    arm.add_argument("--sample", default="")
    arm.add_argument("--experiment-id", default="", help="the proposal or experiment number (NeXus experiment_identifier)")
    arm.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="a profile key a request may set over the profile, e.g. output.compression=lz4; a VALUE that is JSON keeps its type")
    arm.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                     help="user metadata for the file; a VALUE that is JSON keeps its type (20261234 a number, true a boolean), else it is text")
    arm.add_argument("--timeout", type=float, default=30, help="seconds per long poll")
    arm.set_defaults(run=cmd_arm)

    sub.add_parser("status", parents=[common], help="the service's status as JSON").set_defaults(run=cmd_status)
    sub.add_parser("health", parents=[common], help="exit 0 when healthy, 1 when not").set_defaults(run=cmd_health)
    prof = sub.add_parser("profiles", parents=[common], help="the profiles an arm may name, or one merged")
    prof.add_argument("name", nargs="?")
    prof.set_defaults(run=cmd_profiles)
    follow = sub.add_parser("follow", parents=[common], help="print the events, one JSON line each")
    follow.add_argument("--scan-id", help="stop when this scan ends (exit 0 done, 3 otherwise)")
    follow.add_argument("--last-event-id", help="start after this event id (EPOCH-N; 0: before the first): the service replays those it keeps")
    follow.add_argument("--count", type=int, default=0, help="stop after this many events")
    follow.set_defaults(run=cmd_follow)
    prev = sub.add_parser("preview", parents=[common], help="save the scan's latest image as PNG")
    prev.add_argument("--scan-id", required=True)
    prev.add_argument("--max-side", type=int, default=0, help="shrink so the longer side is at most this many pixels")
    prev.add_argument("-o", "--output", required=True)
    prev.set_defaults(run=cmd_preview)

    args = ap.parse_args(argv)
    if args.token and args.token_file:
        print("give the token once: --token-file or --token, not both", file=sys.stderr)
        return 2
    try:
        token = args.token or read_token(args.token_file)
    except TokenError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        return args.run(Service(args.url, token), args)
    except urllib.error.HTTPError as e:
        return refused(e)
    except (urllib.error.URLError, OSError) as e:
        print(f"cannot reach the service at {args.url}: {getattr(e, 'reason', e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
