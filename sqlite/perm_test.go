package sqlite_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/storetest"
)

// mustModes asserts each existing file of path's database is mode want.
func mustModes(tb testing.TB, path string, want os.FileMode) {
	tb.Helper()
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			tb.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			tb.Fatalf("%s is %v, want %v", filepath.Base(name), got, want)
		}
	}
}

// The database and its -wal and -shm hold key hashes and request bodies:
// only the owner may read them, whatever the umask.
func TestOpen_FileModes(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)

	t.Run("OKNewFile", func(t *testing.T) {
		s, path := MustOpen(t)
		defer s.Close()
		storetest.MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: storetest.Ptr(storetest.USD(10))})
		storetest.MustReserve(t, s, "key_a", "idem_1", storetest.USD(4), storetest.T0)
		mustModes(t, path, 0o600)
	})

	t.Run("OKExistingFileTightened", func(t *testing.T) {
		s, path := MustOpen(t)
		storetest.MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: storetest.Ptr(storetest.USD(10))})
		// Loosen the files while they exist, as an older keybrake left them.
		for _, name := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Chmod(name, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s2, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		storetest.MustReserve(t, s2, "key_a", "idem_1", storetest.USD(4), storetest.T0)
		mustModes(t, path, 0o600)
		s2.Close()
		s.Close()
	})
}
