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

// sseMessage is one server-sent event as a client reads it.
type sseMessage struct {
	id, retry   int
	event, data string
}

// readEvents reads the events of body until stop returns true for one or
// the body ends.
func readEvents(t *testing.T, body io.Reader, stop func(sseMessage) bool) []sseMessage {
	t.Helper()
	var out []sseMessage
	var m sseMessage
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
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
			m.id, _ = strconv.Atoi(value)
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

	// A first event, so that the response's head comes at once.
	if code, _ := c.do("POST", "/v1/scans", arm("warm")); code != http.StatusCreated {
		t.Fatalf("arm: %d", code)
	}
	c.do("GET", "/v1/scans/warm/wait?timeout=10", nil)

	first := openEvents(t, ctx, c.base, "1")
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
	last := got[len(got)-1].id
	waitBroker(t, s, "an event while the client was away", func(b *broker) bool { return b.lastID > uint64(last) })
	second := openEvents(t, ctx, c.base, strconv.Itoa(last))
	defer second.Body.Close()
	more := readEvents(t, second.Body, func(m sseMessage) bool {
		return m.event == "done" && strings.Contains(m.data, `"re"`)
	})
	if len(more) == 0 || more[0].retry != retryMillis || more[0].id != last+1 {
		t.Fatalf("after reconnecting with %d: %+v", last, more)
	}
	all := append(got, more...)
	for i, m := range all {
		if m.id != all[0].id+i {
			t.Fatalf("event %d has id %d after %d: a gap or a repeat", i, m.id, all[max(i-1, 0)].id)
		}
	}
	if all[len(all)-1].event != "done" {
		t.Errorf("the events end with %q", all[len(all)-1].event)
	}
	// The first connection replayed warm's events after id 1 (its armed):
	// first_frame onwards.
	if got[0].id != 2 {
		t.Errorf("Last-Event-ID 1 replayed from id %d, want 2", got[0].id)
	}
}

// TestBrokerReplay holds the broker to its buffer: a client gets only the
// events after its last id (0: before the first), at most replayBuffer of
// them; a new client none; a client of an earlier run of the service all
// it holds.
func TestBrokerReplay(t *testing.T) {
	b := newBroker()
	for i := range replayBuffer + 10 {
		b.publish(FileEvent{ScanID: strconv.Itoa(i)})
	}
	if ch, missed := b.subscribe(0, false); len(missed) != 0 {
		t.Errorf("a new client: %d events, want none", len(missed))
		b.unsubscribe(ch)
	} else {
		b.unsubscribe(ch)
	}
	for _, tc := range []struct {
		last      uint64
		n         int
		firstID   uint64
		firstData string
	}{
		{0, replayBuffer, 11, "10"}, // before the first id: what it holds
		{replayBuffer + 9, 1, replayBuffer + 10, strconv.Itoa(replayBuffer + 9)},
		{replayBuffer + 10, 0, 0, ""},
		{100, replayBuffer - 90, 101, "100"},
		{3, replayBuffer, 11, "10"},       // older than the buffer: what it holds
		{1 << 40, replayBuffer, 11, "10"}, // from an earlier run
	} {
		ch, missed := b.subscribe(tc.last, true)
		b.unsubscribe(ch)
		if len(missed) != tc.n {
			t.Errorf("after %d: %d events, want %d", tc.last, len(missed), tc.n)
			continue
		}
		if tc.n > 0 && (missed[0].id != tc.firstID || missed[0].data.(FileEvent).ScanID != tc.firstData) {
			t.Errorf("after %d: first %d %v, want %d %s", tc.last, missed[0].id, missed[0].data, tc.firstID, tc.firstData)
		}
		for i := 1; i < len(missed); i++ {
			if missed[i].id != missed[i-1].id+1 {
				t.Errorf("after %d: id %d after %d", tc.last, missed[i].id, missed[i-1].id)
			}
		}
	}
}

// TestEventsBadLastEventID: a Last-Event-ID that is not an event id (text,
// a number too large, one from an earlier run of the service) never
// fails the request: text is a new client's, which gets only new events;
// an id beyond the service's gets every event it holds.
func TestEventsBadLastEventID(t *testing.T) {
	r := &fakeRunner{planned: 3, tick: time.Millisecond}
	s, c := newTestService(t, r, Config{})
	if code, _ := c.do("POST", "/v1/scans", arm("b1")); code != http.StatusCreated {
		t.Fatalf("arm: %d", code)
	}
	c.do("GET", "/v1/scans/b1/wait?timeout=10", nil)
	for _, tc := range []struct {
		last    string
		replays bool
	}{
		{"abc", false}, {"-1", false}, {"99999999999999999999", false}, {"4000000000", true}, {"0", true},
	} {
		// The last request's subscription has ended, so that the one
		// the next scan's arm waits for is this request's.
		waitBroker(t, s, "the last request to unsubscribe", func(b *broker) bool { return len(b.subs) == 0 })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if !tc.replays {
			// The head comes with the first event: the next scan's arm,
			// once the request has subscribed.
			go func() {
				waitBroker(t, s, "the request to subscribe", func(b *broker) bool { return len(b.subs) > 0 })
				c.do("POST", "/v1/scans", arm("b-"+tc.last))
			}()
		}
		resp := openEvents(t, ctx, c.base, tc.last)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Last-Event-ID %q: %d", tc.last, resp.StatusCode)
		}
		if tc.replays {
			got := readEvents(t, resp.Body, func(m sseMessage) bool { return m.event == "done" })
			if len(got) == 0 || got[0].id != 1 || got[0].event != "armed" {
				t.Errorf("Last-Event-ID %q: %+v, want every event from armed", tc.last, got)
			}
		} else {
			got := readEvents(t, resp.Body, func(sseMessage) bool { return true })
			if len(got) != 1 || got[0].event != "armed" || !strings.Contains(got[0].data, `"b-`+tc.last+`"`) {
				t.Errorf("Last-Event-ID %q: %+v, want the next scan's armed only", tc.last, got)
			}
			c.do("GET", "/v1/scans/b-"+tc.last+"/wait?timeout=10", nil)
		}
		resp.Body.Close()
		cancel()
	}
}
