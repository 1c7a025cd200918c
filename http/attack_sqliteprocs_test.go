package http_test

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/sqlite"
)

// otherProcessEnv names the database and key TestSQLiteOtherProcess
// narrows, when the test binary runs as that other process.
const otherProcessEnv = "KEYBRAKE_TEST_OTHER_PROCESS"

// Several processes may open one SQLite file (sqlite.Open; a second
// `keybrake serve` during a restart, `keybrake serve --replicas` over a
// file), and a process hears only its own key changes. Since SQLite
// reported its key changes as never late (keybrake.SyncKeyWatcher), a
// money-moving request on a cached key was decided on it without reading
// it again: another process took charges.create away from a key, and
// this one still forwarded a $50.00 charge on it, while the other process
// still ran and after it had gone. A SQLite store now reports its changes
// as synchronous only while no other process has the file open, nor did
// since; else the key is read again, as on PostgreSQL.
func TestAttackReplicas_SQLiteOtherProcessNarrowsKey(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":500,"allowed_endpoints":["charges.create"]}`)
	charge := func() int {
		resp, _ := e.Do(t, "POST", "/stripe/v1/charges", "amount=5000&currency=usd&source=tok_visa", map[string]string{"Authorization": "Bearer " + secret})
		return resp.StatusCode
	}
	db := filepath.Join(e.Dir, "keybrake.db")
	narrow := func(t *testing.T, stayOpen bool) {
		if code := charge(); code != http.StatusOK {
			t.Fatalf("charge before the change: %d", code)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestSQLiteOtherProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), otherProcessEnv+"="+db+"|"+id)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "narrowed\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("other process: %q %v %s", line, err, stderr.String())
		}
		if !stayOpen {
			stdin.Close()
			io.Copy(io.Discard, stdout)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("other process: %v %s", err, stderr.String())
			}
		}
		if code := charge(); code != http.StatusForbidden {
			t.Errorf("a charge after another process took charges.create away: %d, want 403", code)
		}
		if stayOpen {
			stdin.Close()
			io.Copy(io.Discard, stdout)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("other process: %v %s", err, stderr.String())
			}
		}
		if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"allowed_endpoints":["charges.create"]}`); resp.StatusCode != 200 {
			t.Fatalf("widen the key again: %d %s", resp.StatusCode, out)
		}
	}
	t.Run("WhileOpen", func(t *testing.T) { narrow(t, true) })
	t.Run("SinceClosed", func(t *testing.T) { narrow(t, false) })
	if n, _ := e.SucceededCents("usd"); n != 2 {
		t.Fatalf("%d charges, want the 2 made before each change", n)
	}
}

// TestSQLiteOtherProcess is the other process of
// TestAttackReplicas_SQLiteOtherProcessNarrowsKey: it takes every
// endpoint but charges.retrieve away from the key, says so, and keeps
// the file open until its stdin closes.
func TestSQLiteOtherProcess(t *testing.T) {
	v := os.Getenv(otherProcessEnv)
	if v == "" {
		t.Skip("run by TestAttackReplicas_SQLiteOtherProcessNarrowsKey")
	}
	db, id, _ := strings.Cut(v, "|")
	s, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.UpdateKey(t.Context(), id, keybrake.KeyUpdate{AllowedEndpoints: &[]string{"charges.retrieve"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("narrowed\n")
	io.Copy(io.Discard, os.Stdin)
}

// narrowInOtherProcess runs TestSQLiteOtherProcess on db (the database
// file, however spelled) to take charges.create away from key id, and
// returns once it has, with the file still open in it; done closes it.
func narrowInOtherProcess(t *testing.T, db, id string) (done func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSQLiteOtherProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), otherProcessEnv+"="+db+"|"+id)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "narrowed\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("other process: %q %v %s", line, err, stderr.String())
	}
	return func() {
		stdin.Close()
		io.Copy(io.Discard, stdout)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("other process: %v %s", err, stderr.String())
		}
	}
}

// A second process that opened the SQLite file through another name of
// it used another -procs sidecar: the sidecar was named after the path as
// spelled (made absolute, symlinks kept), so a `keybrake audit` or a
// second serve given a symlink to the file announced itself where serve
// never looked. It took charges.create from a key, and serve, still
// believing itself alone, forwarded a $50.00 charge on its cached key
// (past the allowlist; the $500 cap held). The sidecar and the watchers
// are now named after the canonical path (symlinks resolved). A symlink
// to the directory held already (its sidecar is the same file); so does
// a bind mount.
func TestAttackSQLiteProcs_SymlinkAlias(t *testing.T) {
	for _, alias := range []string{"file", "dir"} {
		t.Run(alias, func(t *testing.T) {
			e := MustOpen(t)
			id, secret := e.CreateKey(t, `{"daily_usd_cap":500,"allowed_endpoints":["charges.create"]}`)
			charge := func() int {
				resp, _ := e.Do(t, "POST", "/stripe/v1/charges", "amount=5000&currency=usd&source=tok_visa", map[string]string{"Authorization": "Bearer " + secret})
				return resp.StatusCode
			}
			if code := charge(); code != http.StatusOK {
				t.Fatalf("charge before the change: %d", code)
			}
			db := filepath.Join(e.Dir, "keybrake.db")
			other := filepath.Join(t.TempDir(), "alias.db")
			if alias == "dir" {
				dir := filepath.Join(t.TempDir(), "aliasdir")
				if err := os.Symlink(e.Dir, dir); err != nil {
					t.Fatal(err)
				}
				other = filepath.Join(dir, "keybrake.db")
			} else if err := os.Symlink(db, other); err != nil {
				t.Fatal(err)
			}
			done := narrowInOtherProcess(t, other, id)
			if code := charge(); code != http.StatusForbidden {
				t.Errorf("a charge after another process, through %s, took charges.create away: %d, want 403", other, code)
			}
			done()
			if n, _ := e.SucceededCents("usd"); n != 1 {
				t.Fatalf("%d charges, want the one made before the change", n)
			}
		})
	}
}

// The -procs sidecar deleted (or replaced) while serve ran: the next
// process to open the database created a new one and announced itself
// there, and serve, holding the old file, tested the lock of a file no
// one else would ever open again. The other process took charges.create
// from a key and serve forwarded a $50.00 charge on its cached key. serve
// now checks that the sidecar at the path is still its own (and that the
// database file is still the one it opened, with one name), and reads
// keys again when not.
func TestAttackSQLiteProcs_SidecarDeleted(t *testing.T) {
	for _, how := range []string{"deleted", "replaced"} {
		t.Run(how, func(t *testing.T) {
			e := MustOpen(t)
			id, secret := e.CreateKey(t, `{"daily_usd_cap":500,"allowed_endpoints":["charges.create"]}`)
			charge := func() int {
				resp, _ := e.Do(t, "POST", "/stripe/v1/charges", "amount=5000&currency=usd&source=tok_visa", map[string]string{"Authorization": "Bearer " + secret})
				return resp.StatusCode
			}
			if code := charge(); code != http.StatusOK {
				t.Fatalf("charge before the change: %d", code)
			}
			db := filepath.Join(e.Dir, "keybrake.db")
			if err := os.Remove(db + "-procs"); err != nil {
				t.Fatal(err)
			}
			if how == "replaced" {
				if err := os.WriteFile(db+"-procs", make([]byte, 8), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			done := narrowInOtherProcess(t, db, id)
			if code := charge(); code != http.StatusForbidden {
				t.Errorf("a charge after another process took charges.create away, the sidecar %s: %d, want 403", how, code)
			}
			done()
			if code := charge(); code != http.StatusForbidden {
				t.Errorf("a charge after the other process closed: %d, want 403", code)
			}
			if n, _ := e.SucceededCents("usd"); n != 1 {
				t.Fatalf("%d charges, want the one made before the change", n)
			}
		})
	}
}
