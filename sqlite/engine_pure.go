package sqlite

import (
	"database/sql"
	"errors"
	"strings"

	sqlite3 "modernc.org/sqlite"
)

const engineName = "modernc.org/sqlite (pure Go)"

func engineOpen(path string, pragmas []string, immediate bool) (*sql.DB, error) {
	var q []string
	for _, p := range pragmas {
		q = append(q, "_pragma="+p)
	}
	if immediate {
		q = append(q, "_txlock=immediate")
	}
	return sql.Open("sqlite", path+"?"+strings.Join(q, "&"))
}

// errorCode is the extended result code of a SQLite error, if err is one.
func errorCode(err error) (int, bool) {
	var serr *sqlite3.Error
	if errors.As(err, &serr) {
		return serr.Code(), true
	}
	return 0, false
}
