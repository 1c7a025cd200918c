package http

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadAllSized checks the declared size is only a hint: too small,
// too large, unknown, over the limit, or a reader that returns a byte at
// a time, the result is exactly what the reader gave.
func TestReadAllSized(t *testing.T) {
	body := strings.Repeat("0123456789", 300)
	for name, declared := range map[string]int64{
		"OKExact": 3000, "OKShort": 10, "OKLong": 5000, "OKUnknown": -1, "OKZero": 0, "OKOverLimit": 1 << 40, "OKOverPrealloc": 900 << 10,
	} {
		t.Run(name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(body), iotest.OneByteReader(strings.NewReader(body)), iotest.DataErrReader(strings.NewReader(body))} {
				got, err := readAllSized(r, declared, 1<<20)
				if err != nil || string(got) != body {
					t.Fatalf("got %d bytes, %v; want %d bytes", len(got), err, len(body))
				}
			}
		})
	}
	t.Run("ErrRead", func(t *testing.T) {
		boom := errors.New("boom")
		got, err := readAllSized(io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)), 3, 10)
		if !errors.Is(err, boom) || !bytes.Equal(got, []byte("abc")) {
			t.Fatalf("got %q, %v", got, err)
		}
	})
}

// TestReadAllSizedDeclaredIsNotReserved checks a large declared length
// sets aside at most maxPrealloc before the bytes arrive: a client that
// declares a big body and sends it slowly holds no more than it sent.
func TestReadAllSizedDeclaredIsNotReserved(t *testing.T) {
	got, err := readAllSized(strings.NewReader("abc"), 900<<10, 1<<20)
	if err != nil || string(got) != "abc" {
		t.Fatalf("got %q, %v", got, err)
	}
	if cap(got) > maxPrealloc {
		t.Fatalf("cap %d for 3 bytes read, want at most %d", cap(got), maxPrealloc)
	}
}
