package service

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sseMessage is one server-sent event, or one comment, as a client
// reads it.
type sseMessage struct {
	id                   string
	retry                int
	event, data, comment string
}

// number returns the number of an event id, EPOCH-N.
func (m sseMessage) number() int {
	_, n, _ := strings.Cut(m.id, "-")
	i, err := strconv.Atoi(n)
	if err != nil {
		return -1
	}
	return i
}

// readEvents reads the events and comments of body until stop returns
// true for one or the body ends.
func readEvents(t *testing.T, body io.Reader, stop func(sseMessage) bool) []sseMessage {
	t.Helper()
	var out []sseMessage
	var m sseMessage
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if c, ok := strings.CutPrefix(line, ":"); ok {
			c := sseMessage{comment: strings.TrimPrefix(c, " ")}
			out = append(out, c)
			if stop(c) {
				return out
			}
			continue
		}
		if line == "" {
			if m.data == "" {
				continue
			}
			out = append(out, m)
			if stop(m) {
				return out
			}
			m = sseMessage{}
			continue
		}
		field, value, _ := strings.Cut(line, ": ")
		switch field {
		case "id":
			m.id = value
		case "retry":
			m.retry, _ = strconv.Atoi(value)
		case "event":
			m.event = value
		case "data":
			m.data = value
		}
	}
	return out
}

// events returns the events of msgs, without the comments.
func events(msgs []sseMessage) []sseMessage {
	var out []sseMessage
	for _, m := range msgs {
		if m.comment == "" {
			out = append(out, m)
		}
	}
	return out
}

// openEvents opens /v1/events, with Last-Event-ID last when it is not "".
func openEvents(t *testing.T, ctx context.Context, base, last string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/events", nil)
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// waitBroker waits until the service's event broker meets cond, read
// under its lock, failing the test after a minute (a hang).
func waitBroker(t *testing.T, s *Service, what string, cond func(b *broker) bool) {
	t.Helper()
	met := func() bool {
		s.events.mu.Lock()
		defer s.events.mu.Unlock()
		return cond(s.events)
	}
	for deadline := time.Now().Add(time.Minute); !met(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("waited a minute for %s", what)
			return
		}
	}
}

// TestEventsResume: every event has an id, the first of a connection the
// reconnection delay; a client that disconnects in the middle of a scan
// and reconnects with the last id it saw gets every event it missed, in
// order, then the new ones: ids without a gap from armed to done.
func TestEventsResume(t *testing.T) {
	r := &fakeRunner{planned: 60, tick: 10 * time.Millisecond}
	s, c := newTestService(t, r, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if code, _ := c.do("POST", "/v1/scans", arm("warm")); code != http.StatusCreated {
		t.Fatalf("arm: %d", code)
	}
	c.do("GET", "/v1/scans/warm/wait?timeout=10", nil)

	first := openEvents(t, ctx, c.base, s.events.eventID(1))
	if code, _ := c.do("POST", "/v1/scans", arm("re")); code != http.StatusCreated {
		t.Fatalf("arm: %d", code)
	}
	// Read until the scan has reported progress twice, then go away.
	progress := 0
	got := readEvents(t, first.Body, func(m sseMessage) bool {
		if m.event == "progress" && strings.Contains(m.data, `"re"`) {
			progress++
		}
		return progress == 2
	})
	first.Body.Close()
	if len(got) == 0 || got[0].retry != retryMillis {
		t.Fatalf("the first event of a connection: %+v, want retry %d", got, retryMillis)
	}
	// Events go on while the client is away.
	last := got[len(got)-1]
	waitBroker(t, s, "an event while the client was away", func(b *broker) bool { return b.lastID > uint64(last.number()) })
	second := openEvents(t, ctx, c.base, last.id)
	defer second.Body.Close()
	more := readEvents(t, second.Body, func(m sseMessage) bool {
		return m.event == "done" && strings.Contains(m.data, `"re"`)
	})
	if len(more) == 0 || more[0].retry != retryMillis || more[0].number() != last.number()+1 {
		t.Fatalf("after reconnecting with %s: %+v", last.id, more)
	}
	all := append(got, more...)
	for i, m := range all {
		if m.comment != "" {
			t.Fatalf("a comment among the events: %q", m.comment)
		}
		if m.number() != all[0].number()+i || m.id != s.events.eventID(uint64(m.number())) {
			t.Fatalf("event %d has id %s after %s: a gap, a repeat or another run's id", i, m.id, all[max(i-1, 0)].id)
		}
	}
	if all[len(all)-1].event != "done" {
		t.Errorf("the events end with %q", all[len(all)-1].event)
	}
	// The first connection replayed warm's events after its first (its
	// armed): first_frame onwards.
	if got[0].number() != 2 || got[0].event != "first_frame" {
		t.Errorf("Last-Event-ID %s replayed from %s %s, want number 2", s.events.eventID(1), got[0].id, got[0].event)
	}
}

// TestBrokerReplay holds the broker to its buffer: a client gets only the
// events after its last id, at most replayBuffer of them, with a note
// where some it asked for are no longer kept; a new client none; "0"
// every one held; a client of another run of the service every one held,
// with a note naming its id; a client whose id is no id none, with a
// note.
func TestBrokerReplay(t *testing.T) {
	b := newBroker()
	for i := range replayBuffer + 10 {
		b.publish(FileEvent{ScanID: strconv.Itoa(i)})
	}
	other := newBroker()
	if other.epoch == b.epoch || other.eventID(5) == b.eventID(5) {
		t.Fatalf("two runs of the service share ids: %s, %s", b.eventID(5), other.eventID(5))
	}
	id := func(n uint64) string { return b.eventID(n) }
	for _, tc := range []struct {
		last      string
		n         int
		firstID   uint64
		firstData string
		note      string // in the note; "" for none
	}{
		{"", 0, 0, "", ""},
		{"0", replayBuffer, 11, "10", ""}, // before the first: what it holds
		{id(replayBuffer + 9), 1, replayBuffer + 10, strconv.Itoa(replayBuffer + 9), ""},
		{id(replayBuffer + 10), 0, 0, "", ""},
		{id(100), replayBuffer - 90, 101, "100", ""},
		{id(11), replayBuffer - 1, 12, "11", ""},
		{id(10), replayBuffer, 11, "10", ""},
		{id(3), replayBuffer, 11, "10", "the events after " + id(3) + " up to " + id(10) + " are no longer kept"},
		{id(1 << 40), replayBuffer, 11, "10", "beyond the last event"},
		{other.eventID(3), replayBuffer, 11, "10", "Last-Event-ID " + other.eventID(3) + " is of another run of the service (it keeps " + id(11) + " to " + id(replayBuffer+10) + ")"},
		{"4000000000", replayBuffer, 11, "10", "Last-Event-ID 4000000000 is of another run"},
		{"abc", 0, 0, "", `Last-Event-ID "abc" is not an event id`},
		{"-1", 0, 0, "", "is not an event id"},
		{"99999999999999999999", 0, 0, "", "is not an event id"},
		{b.epoch + "-", 0, 0, "", "is not an event id"},
	} {
		ch, missed, note := b.subscribe(tc.last)
		b.unsubscribe(ch)
		if (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
			t.Errorf("after %q: note %q, want one saying %q", tc.last, note, tc.note)
		}
		if len(missed) != tc.n {
			t.Errorf("after %q: %d events, want %d", tc.last, len(missed), tc.n)
			continue
		}
		if tc.n > 0 && (missed[0].id != tc.firstID || missed[0].data.(FileEvent).ScanID != tc.firstData) {
			t.Errorf("after %q: first %d %v, want %d %s", tc.last, missed[0].id, missed[0].data, tc.firstID, tc.firstData)
		}
		for i := 1; i < len(missed); i++ {
			if missed[i].id != missed[i-1].id+1 {
				t.Errorf("after %q: id %d after %d", tc.last, missed[i].id, missed[i-1].id)
			}
		}
	}
}

// TestEventsBadLastEventID: a Last-Event-ID that is no event id of this
// run (text, a number too large, an id of an earlier run of the service)
// never fails the request: text is a new client's, which gets only new
// events after a comment saying why; an id of another run gets every
// event held, after a comment naming it.
func TestEventsBadLastEventID(t *testing.T) {
	r := &fakeRunner{planned: 3, tick: time.Millisecond}
	s, c := newTestService(t, r, Config{})
	if code, _ := c.do("POST", "/v1/scans", arm("b1")); code != http.StatusCreated {
		t.Fatalf("arm: %d", code)
	}
	c.do("GET", "/v1/scans/b1/wait?timeout=10", nil)
	earlier := newBroker().eventID(2)
	for _, tc := range []struct {
		last    string
		replays bool
		comment string // the comment before the events; "" for none
	}{
		{"abc", false, `Last-Event-ID "abc" is not an event id`},
		{"-1", false, "is not an event id"},
		{"99999999999999999999", false, "is not an event id"},
		{"4000000000", true, "Last-Event-ID 4000000000 is of another run of the service"},
		{earlier, true, "Last-Event-ID " + earlier + " is of another run of the service"},
		{"0", true, ""},
	} {
		// The last request's subscription has ended, so that the one
		// the next scan's arm waits for is this request's.
		waitBroker(t, s, "the last request to unsubscribe", func(b *broker) bool { return len(b.subs) == 0 })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		resp := openEvents(t, ctx, c.base, tc.last)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Last-Event-ID %q: %d", tc.last, resp.StatusCode)
		}
		if !tc.replays {
			waitBroker(t, s, "the request to subscribe", func(b *broker) bool { return len(b.subs) > 0 })
			c.do("POST", "/v1/scans", arm("b-"+tc.last))
		}
		got := readEvents(t, resp.Body, func(m sseMessage) bool { return m.event == "done" || !tc.replays && m.event != "" })
		resp.Body.Close()
		cancel()
		if tc.comment != "" && (len(got) == 0 || !strings.Contains(got[0].comment, tc.comment)) {
			t.Errorf("Last-Event-ID %q: %+v, want first a comment saying %q", tc.last, got, tc.comment)
		}
		evs := events(got)
		switch {
		case tc.replays && (len(evs) == 0 || evs[0].id != s.events.eventID(1) || evs[0].event != "armed"):
			t.Errorf("Last-Event-ID %q: %+v, want every event from armed", tc.last, got)
		case !tc.replays && (len(evs) != 1 || evs[0].event != "armed" || !strings.Contains(evs[0].data, `"b-`+tc.last+`"`)):
			t.Errorf("Last-Event-ID %q: %+v, want the next scan's armed only", tc.last, got)
		}
		if !tc.replays {
			c.do("GET", "/v1/scans/b-"+tc.last+"/wait?timeout=10", nil)
		}
	}
}

// TestEventsForAFollowerThatWaits: a client that opens the event stream
// of an idle service gets the head at once, not with the first event (a
// browser's EventSource opens on it), and a comment whenever no event
// has come for the keep-alive interval, so that a read timeout of the
// client or of a proxy never ends a stream that waits for a scan.
func TestEventsForAFollowerThatWaits(t *testing.T) {
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	s, c := newTestService(t, r, Config{})
	s.events.keepAlive = time.Hour // the head alone, with no event nor comment
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := openEvents(t, ctx, c.base, "") // fails the test once ctx ends without a head
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("head: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	resp.Body.Close()

	waitBroker(t, s, "the first stream to end", func(b *broker) bool { return len(b.subs) == 0 })
	s.events.keepAlive = 10 * time.Millisecond
	resp = openEvents(t, ctx, c.base, "")
	defer resp.Body.Close()
	got := readEvents(t, resp.Body, func(m sseMessage) bool { return m.comment != "" })
	if len(got) == 0 || got[len(got)-1].comment != "keep-alive" || len(events(got)) != 0 {
		t.Errorf("an idle stream: %+v, want a keep-alive comment", got)
	}
	// Events still come between comments.
	c.do("POST", "/v1/scans", arm("k"))
	got = readEvents(t, resp.Body, func(m sseMessage) bool { return m.event == "done" })
	if evs := events(got); len(evs) == 0 || evs[0].event != "armed" || evs[0].id != s.events.eventID(1) {
		t.Errorf("after the keep-alives: %+v", got)
	}
}
