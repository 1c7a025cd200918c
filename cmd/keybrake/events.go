package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
)

// eventRecord is one valid billing event of an input file.
type eventRecord struct {
	Line  int            // 1-based line of the event (of its first line, for CSV)
	Body  []byte         // the message body: the JSON line as given, or the CSV row as JSON
	Event *billing.Event // decoded by billing.DecodeEvent
}

// maxReportedErrors is how many bad lines an error lists before "and N more".
const maxReportedErrors = 20

// lineErrors lists every bad line of an input.
type lineErrors struct {
	errs  []string
	total int
}

func (l *lineErrors) add(line int, format string, args ...any) {
	l.total++
	if len(l.errs) < maxReportedErrors {
		l.errs = append(l.errs, fmt.Sprintf("line %d: ", line)+fmt.Sprintf(format, args...))
	}
}

func (l *lineErrors) err(name string) error {
	if l.total == 0 {
		return nil
	}
	msg := fmt.Sprintf("%s: %d invalid event(s):\n  %s", name, l.total, strings.Join(l.errs, "\n  "))
	if l.total > len(l.errs) {
		msg += fmt.Sprintf("\n  and %d more", l.total-len(l.errs))
	}
	return errors.New(msg)
}

// eventReason is DecodeEvent's error as a reader sees it, the field first.
func eventReason(err error) string {
	msg := keybrake.ErrorMessage(err)
	if p := keybrake.ErrorParamOf(err); p != "" && !strings.Contains(msg, p) {
		return p + ": " + msg
	}
	return msg
}

// readEvents reads every event of r, "jsonl" (one JSON object a line; blank
// lines skipped) or "csv" (a header row naming Event's JSON fields, and
// metadata.<key> columns). It returns the valid events, or an error naming
// every bad line (name is the input's name); it never returns a partial
// list with an error.
func readEvents(r io.Reader, name, format string) ([]eventRecord, error) {
	switch format {
	case "jsonl":
		return readJSONL(r, name)
	case "csv":
		return readCSV(r, name)
	}
	return nil, fmt.Errorf("unknown format %q: want jsonl or csv", format)
}

func readJSONL(r io.Reader, name string) ([]eventRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), billing.MaxEventBytes+4096)
	var out []eventRecord
	var bad lineErrors
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		ev, err := billing.DecodeEvent(b)
		if err != nil {
			bad.add(line, "%s", eventReason(err))
			continue
		}
		out = append(out, eventRecord{Line: line, Body: bytes.Clone(b), Event: ev})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			bad.add(line+1, "longer than %d bytes", billing.MaxEventBytes)
			return nil, bad.err(name)
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if err := bad.err(name); err != nil {
		return nil, err
	}
	return out, nil
}

// eventColumns are the CSV columns, Event's JSON fields.
var eventColumns = map[string]bool{
	"customer_id": true, "billing_period": true, "amount": true, "currency": true, "stripe_customer": true,
	"payment_method": true, "source": true, "description": true,
}

var integer = regexp.MustCompile(`^-?[0-9]+$`)

func readCSV(r io.Reader, name string) ([]eventRecord, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 0 // every row has the header's width
	header, err := cr.Read()
	if err == io.EOF {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	seen := map[string]bool{}
	for i, col := range header {
		col = strings.TrimSpace(strings.TrimPrefix(col, "\ufeff"))
		header[i] = col
		switch {
		case seen[col]:
			return nil, fmt.Errorf("%s: line 1: column %q appears twice", name, col)
		case eventColumns[col], strings.HasPrefix(col, "metadata.") && len(col) > len("metadata."):
		default:
			return nil, fmt.Errorf("%s: line 1: unknown column %q: want the event's JSON fields (customer_id, billing_period, amount, currency, stripe_customer, payment_method, source, description) or metadata.<key>", name, col)
		}
		seen[col] = true
	}
	var out []eventRecord
	var bad lineErrors
	for {
		row, err := cr.Read()
		if err == io.EOF {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				bad.add(pe.StartLine, "%v", pe.Err)
				if pe.Err == csv.ErrFieldCount {
					continue
				}
			}
			// Past a syntax error, the reader cannot resynchronise.
			if bad.total == 0 {
				return nil, fmt.Errorf("read %s: %w", name, err)
			}
			return nil, bad.err(name)
		}
		body := csvRowJSON(header, row)
		ev, err := billing.DecodeEvent(body)
		if err != nil {
			bad.add(line, "%s", eventReason(err))
			continue
		}
		out = append(out, eventRecord{Line: line, Body: body, Event: ev})
	}
	if err := bad.err(name); err != nil {
		return nil, err
	}
	return out, nil
}

// csvRowJSON turns a row into the event's JSON: empty cells are left out,
// an integer amount is a JSON number (anything else stays a string, which
// DecodeEvent refuses with the reason), metadata.<key> cells go into
// metadata.
func csvRowJSON(header, row []string) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	meta := map[string]string{}
	var metaKeys []string
	first := true
	for i, col := range header {
		v := row[i]
		if v == "" {
			continue
		}
		if k, ok := strings.CutPrefix(col, "metadata."); ok {
			meta[k] = v
			metaKeys = append(metaKeys, k)
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(col)
		b.Write(k)
		b.WriteByte(':')
		if col == "amount" && integer.MatchString(v) {
			b.WriteString(v)
		} else {
			s, _ := json.Marshal(v)
			b.Write(s)
		}
	}
	if len(metaKeys) > 0 {
		if !first {
			b.WriteByte(',')
		}
		b.WriteString(`"metadata":{`)
		for i, k := range metaKeys {
			if i > 0 {
				b.WriteByte(',')
			}
			kj, _ := json.Marshal(k)
			vj, _ := json.Marshal(meta[k])
			b.Write(kj)
			b.WriteByte(':')
			b.Write(vj)
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return b.Bytes()
}
