//go:build csqlite

package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	sqlite3 "github.com/mattn/go-sqlite3"
)

const engineName = "C SQLite (github.com/mattn/go-sqlite3)"

// connector opens connections of one pool, each with its pragmas applied.
type connector struct {
	drv *sqlite3.SQLiteDriver
	dsn string
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.drv }

func engineOpen(path string, pragmas []string, immediate bool) (*sql.DB, error) {
	drv := &sqlite3.SQLiteDriver{ConnectHook: func(conn *sqlite3.SQLiteConn) error {
		for _, p := range pragmas {
			if _, err := conn.Exec("PRAGMA "+p, nil); err != nil {
				return err
			}
		}
		return nil
	}}
	// A plain path (open refuses '?' and '#' in it): the driver reads its
	// parameters after the '?' and opens what comes before it as is.
	dsn := path + "?_txlock=deferred"
	if immediate {
		dsn = path + "?_txlock=immediate"
	}
	return sql.OpenDB(connector{drv: drv, dsn: dsn}), nil
}

// errorCode is the extended result code of a SQLite error, if err is one.
func errorCode(err error) (int, bool) {
	var serr sqlite3.Error
	if errors.As(err, &serr) {
		return int(serr.ExtendedCode), true
	}
	var perr *sqlite3.Error
	if errors.As(err, &perr) && perr != nil {
		return int(perr.ExtendedCode), true
	}
	return 0, false
}
