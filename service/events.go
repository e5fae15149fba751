package service

import (
	"context"
	"strconv"
	"sync"

	"github.com/danielgtaylor/huma/v2/sse"
)

// broker hands every event to every subscriber without ever waiting for
// one: a subscriber whose buffer is full is dropped (its channel closed),
// and its client reconnects. Each event gets the next id, and the broker
// keeps the last replayBuffer of them, so that a client that reconnects
// with the last id it saw (Last-Event-ID) gets the events it missed.
type broker struct {
	mu     sync.Mutex
	subs   map[chan event]struct{}
	lastID uint64  // of the last event published; 0 before the first
	recent []event // the last replayBuffer events, oldest first
}

// event is one event as the broker hands it out: its id and its data,
// whose type names it (eventTypes).
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
)

func newBroker() *broker { return &broker{subs: map[chan event]struct{}{}} }

// subscribe returns a new subscriber's channel and, for a client that
// resumes, the events with ids after last that the broker still holds, in
// order (ids start at 1: last 0 asks for every event held); a new client
// gets none. A last beyond every id the broker gave is a client of an
// earlier run of the service: it gets every event held.
func (b *broker) subscribe(last uint64, resume bool) (chan event, []event) {
	ch := make(chan event, subscriberBuffer)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[ch] = struct{}{}
	if !resume {
		return ch, nil
	}
	if last > b.lastID {
		last = 0
	}
	var missed []event
	for _, ev := range b.recent {
		if ev.id > last {
			missed = append(missed, ev)
		}
	}
	return ch, missed
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
	LastEventID string `header:"Last-Event-ID" maxLength:"20" doc:"The id of the last event the client received, which a browser's EventSource sends when it reconnects: the events after it that the service still holds (the last 256) come first."`
}

// follow sends the events after the request's Last-Event-ID that the
// broker holds, then every new one, each with its id (and the first with
// the reconnection delay), until ctx ends, the client falls behind or a
// send fails.
func (b *broker) follow(ctx context.Context, in *eventsInput, send sse.Sender) {
	last, err := strconv.ParseUint(in.LastEventID, 10, 64)
	sub, missed := b.subscribe(last, err == nil) // none or not an id: a new client
	defer b.unsubscribe(sub)
	retry := retryMillis
	put := func(ev event) bool {
		err := send(sse.Message{ID: int(ev.id), Data: ev.data, Retry: retry})
		retry = 0
		return err == nil
	}
	for _, ev := range missed {
		if !put(ev) {
			return
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub:
			if !ok {
				return // fell behind
			}
			if !put(ev) {
				return
			}
		}
	}
}
