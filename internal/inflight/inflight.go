// Package inflight counts work that runs in the background, so that a
// caller can wait until none is left.
package inflight

import (
	"context"
	"sync"
)

// Group counts background tasks. Unlike sync.WaitGroup, tasks may be added
// while another goroutine waits, and a wait can be cut short by its
// context. The zero value is ready to use.
type Group struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; nil while n is 0
}

// Add counts one more task.
func (g *Group) Add() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		g.zero = make(chan struct{})
	}
	g.n++
}

// Done counts one task finished. It panics if no task is counted.
func (g *Group) Done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		panic("inflight: Done without Add")
	}
	g.n--
	if g.n == 0 {
		close(g.zero)
		g.zero = nil
	}
}

// Len returns how many tasks are counted.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// Wait returns when no task is counted, or with ctx's error when ctx ends
// first. Under a steady stream of new tasks it may wait as long as the
// stream lasts: it waits for none, not for the ones counted at the call.
func (g *Group) Wait(ctx context.Context) error {
	g.mu.Lock()
	z := g.zero
	g.mu.Unlock()
	if z == nil {
		return nil
	}
	select {
	case <-z:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
