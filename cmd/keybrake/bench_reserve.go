package main

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
)

// reserveMetric is the histogram every serve keeps of the time a priced
// request spends on the store before it is forwarded (its reservation
// checked and committed).
const reserveMetric = "keybrake_reserve_duration_seconds"

// reserveTotals is the sum (seconds) and count of reserveMetric over every
// replica at one moment.
type reserveTotals struct {
	seconds float64
	count   float64
	ok      bool
}

// reserveMark reads reserveMetric from every replica's /metrics. ok is
// false if any replica could not be read, so no phase reports a share.
func (b *bench) reserveMark(ctx context.Context) reserveTotals {
	t := reserveTotals{ok: len(b.proxyURLs) > 0}
	for _, base := range b.proxyURLs {
		s, c, err := b.readReserveMetric(ctx, base)
		if err != nil {
			return reserveTotals{}
		}
		t.seconds, t.count = t.seconds+s, t.count+c
	}
	return t
}

// reserveSince returns the mean µs a reservation took between mark and
// now, or 0 if none was made or a reading failed.
func (b *bench) reserveSince(ctx context.Context, mark reserveTotals) float64 {
	now := b.reserveMark(ctx)
	if !mark.ok || !now.ok || now.count <= mark.count {
		return 0
	}
	return (now.seconds - mark.seconds) / (now.count - mark.count) * 1e6
}

// readReserveMetric reads the _sum and _count of reserveMetric from the
// Prometheus text that serve at base gives its admin.
func (b *bench) readReserveMetric(ctx context.Context, base string) (seconds, count float64, err error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+benchAdminToken)
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case reserveMetric + "_sum":
			seconds, err = strconv.ParseFloat(value, 64)
		case reserveMetric + "_count":
			count, err = strconv.ParseFloat(value, 64)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return seconds, count, sc.Err()
}
