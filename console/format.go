package console

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// symbols are the currencies written with a symbol before the amount;
// every other currency is written after it, in capitals ("1,200.00 CHF").
var symbols = map[string]string{"usd": "$", "eur": "€", "gbp": "£", "jpy": "¥", "cad": "CA$", "aud": "A$", "inr": "₹"}

// usd formats USD micros as dollars with thousands separators: "$1,234.50",
// and sub-cent amounts to the micro ("$0.015").
func usd(m keybrake.Micros) string {
	s := m.String()
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	out := "$" + group(whole) + "." + frac
	if neg {
		out = "-" + out
	}
	return out
}

// usdPtr formats an optional amount, "—" for none.
func usdPtr(m *keybrake.Micros) string {
	if m == nil {
		return "—"
	}
	return usd(*m)
}

// money formats an amount in a currency's minor units by the currency's
// exponent: 1000 usd is "$10.00", 1000 jpy "¥1,000", 1000 bhd "1.000 BHD".
func money(amount int64, currency string) string {
	if currency == "" {
		return ""
	}
	cur := strings.ToLower(currency)
	exp, ok := stripe.Exponent(cur)
	if !ok {
		exp = 2
	}
	neg := amount < 0
	if neg {
		amount = -amount
	}
	digits := strconv.FormatInt(amount, 10)
	if exp > 0 {
		for len(digits) <= exp {
			digits = "0" + digits
		}
		digits = group(digits[:len(digits)-exp]) + "." + digits[len(digits)-exp:]
	} else {
		digits = group(digits)
	}
	var out string
	if sym, ok := symbols[cur]; ok {
		out = sym + digits
	} else {
		out = digits + " " + strings.ToUpper(cur)
	}
	if neg {
		out = "-" + out
	}
	return out
}

// group puts thousands separators into a string of digits.
func group(d string) string {
	if len(d) <= 3 {
		return d
	}
	var b strings.Builder
	pre := len(d) % 3
	if pre > 0 {
		b.WriteString(d[:pre])
	}
	for i := pre; i < len(d); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(d[i : i+3])
	}
	return b.String()
}

// timeTag renders t as a <time> the script shows in the viewer's zone,
// with UTC in its title and as the text without the script.
func timeTag(t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	u := t.UTC()
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`,
		u.Format(time.RFC3339Nano), u.Format("2006-01-02 15:04:05 UTC"), u.Format("2006-01-02 15:04 UTC")))
}

func timePtrTag(t *time.Time) template.HTML {
	if t == nil {
		return "—"
	}
	return timeTag(*t)
}

// bar renders spent against cap as a small SVG bar: green, amber from
// 80%, red at the cap.
func bar(spent keybrake.Micros, cap *keybrake.Micros) template.HTML {
	if cap == nil {
		return ""
	}
	pct := 100.0
	if *cap > 0 {
		pct = float64(spent) / float64(*cap) * 100 // display only; money stays integral
	}
	if pct > 100 {
		pct = 100
	}
	class := "ok"
	switch {
	case pct >= 100:
		class = "full"
	case pct >= 80:
		class = "warn"
	}
	return template.HTML(fmt.Sprintf(`<svg class="bar" viewBox="0 0 100 8" preserveAspectRatio="none" role="img" aria-label="%.0f%% of the cap used"><rect class="track" width="100" height="8" rx="2"/><rect class="fill %s" width="%.2f" height="8" rx="2"/></svg>`, pct, class, pct))
}

// status is a key's state at now.
func status(k *keybrake.Key, now time.Time) string {
	switch {
	case k.RevokedAt != nil && !now.Before(*k.RevokedAt):
		return "revoked"
	case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
		return "expired"
	}
	return "active"
}

// chart renders hourly spend as an SVG bar chart covering [from, to), one
// bar per hour, with a label at each UTC midnight and the peak marked.
func chart(points []keybrake.SpendPoint, from, to time.Time) template.HTML {
	from = from.UTC().Truncate(time.Hour)
	hours := int(to.Sub(from) / time.Hour)
	if hours < 1 {
		hours = 1
	}
	byHour := make([]keybrake.Micros, hours)
	var peak, sum keybrake.Micros
	for _, p := range points {
		i := int(p.Start.Sub(from) / time.Hour)
		if i < 0 || i >= hours {
			continue
		}
		byHour[i] += p.Micros
		sum += p.Micros
		if byHour[i] > peak {
			peak = byHour[i]
		}
	}
	const w, h, top, bottom = 840.0, 180.0, 16.0, 22.0
	bw := w / float64(hours)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="Spend per hour over %d hours: %s in all, peak %s per hour">`, w, h, hours, usd(sum), usd(peak))
	fmt.Fprintf(&b, `<line class="axis" x1="0" y1="%.1f" x2="%.0f" y2="%.1f"/>`, h-bottom, w, h-bottom)
	for i := 0; i < hours; i++ {
		at := from.Add(time.Duration(i) * time.Hour)
		if at.Hour() == 0 {
			x := float64(i) * bw
			fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/><text class="tick" x="%.1f" y="%.1f">%s</text>`,
				x, top, x, h-bottom, x+3, h-6, at.Format("Jan 2"))
		}
		if byHour[i] == 0 || peak == 0 {
			continue
		}
		bh := (h - top - bottom) * float64(byHour[i]) / float64(peak)
		if bh < 1 {
			bh = 1
		}
		fmt.Fprintf(&b, `<rect class="spend" x="%.2f" y="%.2f" width="%.2f" height="%.2f"><title>%s UTC: %s</title></rect>`,
			float64(i)*bw+0.5, h-bottom-bh, bw-1, bh, at.Format("Jan 2 15:00"), usd(byHour[i]))
	}
	if peak > 0 {
		fmt.Fprintf(&b, `<text class="peak" x="%.0f" y="11" text-anchor="end">peak %s / hour</text>`, w-2, usd(peak))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
