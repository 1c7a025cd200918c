package inflight_test

import (
	"context"
	"testing"
	"time"

	"github.com/keybrake/keybrake/internal/inflight"
)

func TestGroup(t *testing.T) {
	t.Run("EmptyReturnsAtOnce", func(t *testing.T) {
		var g inflight.Group
		if err := g.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("WaitsForEveryTask", func(t *testing.T) {
		var g inflight.Group
		release := make(chan struct{})
		for range 3 {
			g.Add()
			go func() { <-release; g.Done() }()
		}
		waited := make(chan error)
		go func() { waited <- g.Wait(context.Background()) }()
		select {
		case <-waited:
			t.Fatal("Wait returned with tasks left")
		default:
		}
		close(release)
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		if n := g.Len(); n != 0 {
			t.Fatalf("Len = %d", n)
		}
	})
	t.Run("ErrContext", func(t *testing.T) {
		var g inflight.Group
		g.Add()
		defer g.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if err := g.Wait(ctx); err != context.DeadlineExceeded {
			t.Fatalf("Wait = %v, want deadline exceeded", err)
		}
	})
	t.Run("ReusableAfterZero", func(t *testing.T) {
		var g inflight.Group
		g.Add()
		g.Done()
		g.Add()
		done := make(chan error)
		go func() { done <- g.Wait(context.Background()) }()
		g.Done()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
