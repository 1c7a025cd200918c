package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
)

// fileMode is the mode of the database file. The store holds vault key
// hashes and the request bodies the resolver replays, so only the owner may
// read it. SQLite gives the -wal and -shm files it creates the mode of the
// database file, whatever the umask.
const fileMode fs.FileMode = 0o600

// secureFiles creates the database file at path with fileMode if it does not
// exist yet, and takes group and world access away from it and from an
// existing -wal and -shm, logging each file it changes. It never adds
// permissions.
func secureFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
	switch {
	case err == nil:
		// The umask cannot loosen 0600, but a file system may ignore modes.
		if err := f.Close(); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrExist):
		return err
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		mode := fi.Mode().Perm()
		if mode&0o077 == 0 || !fi.Mode().IsRegular() {
			continue
		}
		if err := os.Chmod(name, mode&0o700); err != nil {
			return fmt.Errorf("%s is readable by others (%v) and cannot be made owner-only: %w", name, mode, err)
		}
		slog.Default().Warn("sqlite: database file was readable by others; made it owner-only", "file", name, "was", mode.String(), "now", (mode & 0o700).String())
	}
	return nil
}
