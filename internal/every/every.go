// Package every runs a function periodically, for the keep-alives of an
// in-flight message (a ledger lease, an NSQ TOUCH, a JetStream
// InProgress), without a goroutine per message.
//
// A goroutine with a ticker per message cost a goroutine start and, at
// stop, a wait for that goroutine to be scheduled just to exit: on a busy
// machine that wait is a scheduling delay added to every message, twice per
// billing event. A timer costs neither until it fires, and almost none
// does: messages are handled in milliseconds, keep-alives fire every tens of
// seconds.
package every

import (
	"sync"
	"time"
)

// Start calls fn every d, the first time d from now, until stop is called.
// Calls never overlap; stop returns once no call is running, and none
// starts after it.
func Start(d time.Duration, fn func()) (stop func()) {
	k := &keeper{d: d, fn: fn}
	k.mu.Lock()
	k.t = time.AfterFunc(d, k.tick)
	k.mu.Unlock()
	return k.stop
}

type keeper struct {
	d       time.Duration
	fn      func()
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
	running sync.WaitGroup
}

func (k *keeper) tick() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.running.Add(1)
	k.mu.Unlock()
	defer k.running.Done()
	k.fn()
	k.mu.Lock()
	if !k.stopped {
		k.t.Reset(k.d)
	}
	k.mu.Unlock()
}

func (k *keeper) stop() {
	k.mu.Lock()
	k.stopped = true
	k.t.Stop()
	k.mu.Unlock()
	k.running.Wait()
}
