package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// broker hands every event to every subscriber without ever waiting for
// one: a subscriber whose buffer is full is dropped (its channel closed),
// and its client reconnects. Each event gets the next number, and the
// broker keeps the last replayBuffer of them, so that a client that
// reconnects with the last id it saw (Last-Event-ID) gets the events it
// missed. An event's id is the broker's epoch and its number, EPOCH-N:
// ids are unique across restarts of the service, so that a client of an
// earlier run is told so rather than given a wrong slice.
type broker struct {
	epoch string // names this run of the service in every event id
	// keepAlive is how long a stream may go without a write before it
	// gets a comment, so that clients, proxies and their read timeouts
	// see an idle stream alive.
	keepAlive time.Duration

	mu     sync.Mutex
	subs   map[chan event]struct{}
	lastID uint64  // number of the last event published; 0 before the first
	recent []event // the last replayBuffer events, oldest first
}

// event is one event as the broker hands it out: its number and its
// data, whose type names it (eventTypes).
type event struct {
	id   uint64
	data any
}

const (
	// subscriberBuffer is how many events a subscriber may fall behind.
	subscriberBuffer = 256
	// replayBuffer is how many past events a reconnecting client may get:
	// at four progress events a second, about a minute of a scan.
	replayBuffer = 256
	// retryMillis is the reconnection delay the events tell a client.
	retryMillis = 1000
	// keepAliveEvery is how often an idle stream gets a comment.
	keepAliveEvery = 15 * time.Second
	// eventWriteTimeout bounds each write to a stream: a client that stops
	// reading is dropped.
	eventWriteTimeout = 5 * time.Second
)

// lastEpoch is the last epoch a broker took, so that two brokers of one
// process never share one.
var lastEpoch atomic.Int64

// newEpoch returns an epoch unique to this run of the service: the time
// in nanoseconds, later than any taken before in this process, in base
// 36.
func newEpoch() string {
	for {
		last, now := lastEpoch.Load(), time.Now().UnixNano()
		now = max(now, last+1)
		if lastEpoch.CompareAndSwap(last, now) {
			return strconv.FormatInt(now, 36)
		}
	}
}

func newBroker() *broker {
	return &broker{epoch: newEpoch(), keepAlive: keepAliveEvery, subs: map[chan event]struct{}{}}
}

// eventID returns the id of event number n.
func (b *broker) eventID(n uint64) string { return b.epoch + "-" + strconv.FormatUint(n, 10) }

// eventIDPattern is what an event id looks like: EPOCH-N, or N alone as
// the ids of earlier versions of the service were.
var eventIDPattern = regexp.MustCompile(`^(?:([0-9a-z]{1,13})-)?([0-9]{1,19})$`)

// subscribe returns a new subscriber's channel and the events held for
// a client that resumes after the id last, in order, with a note for the
// client where the events are not the ones it asked for:
//
//   - no id: a new client, no events;
//   - an id of this run: the events after it that the broker still
//     holds, and a note when some of them are no longer held;
//   - "0", before any event: every event held;
//   - an id of another run of the service (another epoch, or a number
//     alone): every event held, and a note naming the id;
//   - anything else: no events, and a note that it is not an event id.
func (b *broker) subscribe(last string) (ch chan event, missed []event, note string) {
	ch = make(chan event, subscriberBuffer)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[ch] = struct{}{}
	if last == "" {
		return ch, nil, ""
	}
	m := eventIDPattern.FindStringSubmatch(last)
	var n uint64
	var err error
	if m != nil {
		n, err = strconv.ParseUint(m[2], 10, 64)
	}
	switch {
	case m == nil || err != nil:
		return ch, nil, fmt.Sprintf("Last-Event-ID %q is not an event id of this service (%s): only new events follow", last, b.idRange())
	case last == "0":
		return ch, b.after(0), ""
	case m[1] != b.epoch:
		return ch, b.after(0), fmt.Sprintf("Last-Event-ID %s is of another run of the service (%s): every event kept follows", last, b.idRange())
	case n > b.lastID:
		return ch, b.after(0), fmt.Sprintf("Last-Event-ID %s is beyond the last event (%s): every event kept follows", last, b.idRange())
	}
	missed = b.after(n)
	if len(missed) > 0 && missed[0].id > n+1 {
		note = fmt.Sprintf("the events after %s up to %s are no longer kept: the %d kept follow", last, b.eventID(missed[0].id-1), len(missed))
	}
	return ch, missed, note
}

// after returns the events held with numbers after n. The caller holds
// b.mu.
func (b *broker) after(n uint64) []event {
	var out []event
	for _, ev := range b.recent {
		if ev.id > n {
			out = append(out, ev)
		}
	}
	return out
}

// idRange says which ids the broker holds. The caller holds b.mu.
func (b *broker) idRange() string {
	if len(b.recent) == 0 {
		return "no event yet; ids of this run are " + b.eventID(1) + " on"
	}
	return fmt.Sprintf("it keeps %s to %s", b.eventID(b.recent[0].id), b.eventID(b.lastID))
}

func (b *broker) unsubscribe(ch chan event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[ch]; ok {
		delete(b.subs, ch)
		close(ch)
	}
}

// publish gives data the next id, keeps it for reconnecting clients and
// sends it to every subscriber that has room.
func (b *broker) publish(data any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastID++
	ev := event{id: b.lastID, data: data}
	if len(b.recent) == replayBuffer {
		copy(b.recent, b.recent[1:])
		b.recent = b.recent[:replayBuffer-1]
	}
	b.recent = append(b.recent, ev)
	for ch := range b.subs {
		select {
		case ch <- ev:
		default:
			delete(b.subs, ch)
			close(ch)
		}
	}
}

// eventsInput is a request for the event stream.
type eventsInput struct {
	LastEventID string `header:"Last-Event-ID" maxLength:"40" doc:"The id of the last event the client received, which a browser's EventSource sends when it reconnects: the events after it that the service still holds (the last 256) come first. 0: every event held. An id of another run of the service (the part before the dash differs): every event held, after a comment that says so."`
}

// eventNames maps the events' data types to their names (eventTypes).
var eventNames = func() map[reflect.Type]string {
	m := make(map[reflect.Type]string, len(eventTypes))
	for name, v := range eventTypes {
		m[reflect.TypeOf(v)] = name
	}
	return m
}()

// follow answers a request for the event stream on w: the head at once,
// then a comment where the events are not the ones asked for (see
// subscribe), the events held after Last-Event-ID, then every new one,
// each with its id (and the first with the reconnection delay), and a
// comment whenever the stream has been idle for keepAlive, until ctx
// ends, the client falls behind or a write fails.
func (b *broker) follow(ctx context.Context, last string, w http.ResponseWriter) {
	sub, missed, note := b.subscribe(last)
	defer b.unsubscribe(sub)
	st := &eventStream{w: w, rc: http.NewResponseController(w), retry: retryMillis}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if st.flush() != nil {
		return
	}
	if note != "" && st.comment(note) != nil {
		return
	}
	for _, ev := range missed {
		if st.event(b.eventID(ev.id), ev.data) != nil {
			return
		}
	}
	idle := time.NewTimer(b.keepAlive)
	defer idle.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-idle.C:
			err = st.comment("keep-alive")
		case ev, ok := <-sub:
			if !ok {
				return // fell behind
			}
			err = st.event(b.eventID(ev.id), ev.data)
		}
		if err != nil {
			return
		}
		idle.Reset(b.keepAlive)
	}
}

// eventStream writes server-sent events to one client, each within
// eventWriteTimeout and flushed.
type eventStream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	retry int // the reconnection delay, for the next event; 0 once sent
	buf   []byte
}

// event writes one event: its id, the reconnection delay with the first,
// its name and its data as JSON on one line.
func (s *eventStream) event(id string, data any) error {
	body, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("event %s: %w", id, err)
	}
	s.buf = append(s.buf[:0], "id: "...)
	s.buf = append(s.buf, id...)
	if s.retry > 0 {
		s.buf = fmt.Appendf(s.buf, "\nretry: %d", s.retry)
		s.retry = 0
	}
	s.buf = append(s.buf, "\nevent: "...)
	s.buf = append(s.buf, eventNames[reflect.TypeOf(data)]...)
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, body...)
	s.buf = append(s.buf, "\n\n"...)
	return s.write()
}

// comment writes a comment line, which clients ignore: text is one line.
func (s *eventStream) comment(text string) error {
	s.buf = append(append(append(s.buf[:0], ": "...), text...), "\n\n"...)
	return s.write()
}

func (s *eventStream) write() error {
	// A writer without deadlines (a test's recorder) writes without one.
	s.rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	return s.flush()
}

func (s *eventStream) flush() error {
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("event stream: %w", err)
	}
	return nil
}

// eventsResponse documents the event stream: text/event-stream, each
// message one of the events, as huma's sse package documents a stream,
// with ids of this service's form.
func (s *Service) eventsResponse() map[string]*huma.Response {
	reg := s.api.OpenAPI().Components.Schemas
	var names []string
	for name := range eventTypes {
		names = append(names, name)
	}
	slices.Sort(names)
	var messages []*huma.Schema
	for _, name := range names {
		messages = append(messages, &huma.Schema{
			Title: "Event " + name,
			Type:  huma.TypeObject,
			Properties: map[string]*huma.Schema{
				"id": {Type: huma.TypeString, Pattern: "^[0-9a-z]+-[0-9]+$",
					Description: "The event's id: the run of the service (its epoch), a dash and the event's number in the run, from 1."},
				"event": {Type: huma.TypeString, Enum: []any{name}, Description: "The event's name."},
				"data":  reg.Schema(reflect.TypeOf(eventTypes[name]), true, name),
				"retry": {Type: huma.TypeInteger, Description: "The reconnection delay in milliseconds: with the first event of a connection."},
			},
			Required: []string{"id", "event", "data"},
		})
	}
	return map[string]*huma.Response{
		"200": {Description: "The event stream", Content: map[string]*huma.MediaType{
			"text/event-stream": {Schema: &huma.Schema{
				Title:       "Server-sent events",
				Description: "Each message is one of these, as server-sent event fields (id:, retry:, event:, data: with the JSON on one line). Comment lines (: text) come when the stream is idle for 15 s, and where the events are not the ones Last-Event-ID asked for, saying why.",
				Type:        huma.TypeArray,
				Items:       &huma.Schema{OneOf: messages},
			}},
		}},
	}
}
