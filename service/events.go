package service

import "sync"

// broker hands every event to every subscriber without ever waiting for
// one: a subscriber whose buffer is full is dropped (its channel closed),
// and its client reconnects.
type broker struct {
	mu   sync.Mutex
	subs map[chan any]struct{}
}

// subscriberBuffer is how many events a subscriber may fall behind.
const subscriberBuffer = 256

func newBroker() *broker { return &broker{subs: map[chan any]struct{}{}} }

func (b *broker) subscribe() chan any {
	ch := make(chan any, subscriberBuffer)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch
}

func (b *broker) unsubscribe(ch chan any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[ch]; ok {
		delete(b.subs, ch)
		close(ch)
	}
}

// publish sends ev to every subscriber that has room.
func (b *broker) publish(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- ev:
		default:
			delete(b.subs, ch)
			close(ch)
		}
	}
}
