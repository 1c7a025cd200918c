package keybrake_test

import (
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

func TestNewReservationID(t *testing.T) {
	format := regexp.MustCompile(`^rsv_[0-9a-v]{10}[0-9A-Za-z]{14}$`)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	t.Run("Format", func(t *testing.T) {
		for _, at := range []time.Time{t0, time.Unix(0, 0), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)} {
			if id := keybrake.NewReservationID(at); !format.MatchString(id) || len(id) != 28 {
				t.Fatalf("NewReservationID(%s) = %q", at, id)
			}
		}
	})
	t.Run("OrderedByTime", func(t *testing.T) {
		// Later IDs sort after earlier ones as bytes, across every digit
		// carry of the time part.
		var ids []string
		for i := 0; i < 2000; i++ {
			ids = append(ids, keybrake.NewReservationID(t0.Add(time.Duration(i*i)*time.Millisecond)))
		}
		if !sort.StringsAreSorted(ids) {
			t.Fatal("IDs of increasing times are not sorted")
		}
	})
	t.Run("RandomWithinOneMillisecond", func(t *testing.T) {
		seen := map[string]bool{}
		for i := 0; i < 10000; i++ {
			id := keybrake.NewReservationID(t0)
			if seen[id] {
				t.Fatalf("duplicate ID %s", id)
			}
			seen[id] = true
		}
		// Every random character is used: the suffix draws from all 62.
		chars := map[byte]bool{}
		for id := range seen {
			for i := 14; i < len(id); i++ {
				chars[id[i]] = true
			}
		}
		if len(chars) != 62 {
			t.Fatalf("random part uses %d characters, want 62", len(chars))
		}
	})
}

func BenchmarkNewReservationID(b *testing.B) {
	now := time.Now()
	for i := 0; i < b.N; i++ {
		keybrake.NewReservationID(now)
	}
}
