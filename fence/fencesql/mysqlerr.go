package fencesql

import "reflect"

// mysqlErrorNumber finds a *mysql.MySQLError of
// github.com/go-sql-driver/mysql in err's chain (as errors.As would) and
// returns its error number. It recognises the type by name and reads its
// Number field, so that this package does not link the MySQL driver into
// programs that use only PostgreSQL or SQLite; the driver's error type has
// no method that would give the number through an interface.
func mysqlErrorNumber(err error) (uint16, bool) {
	for _, e := range chain(err, nil) {
		v := reflect.ValueOf(e)
		if v.Kind() != reflect.Pointer || v.IsNil() {
			continue
		}
		t := v.Type().Elem()
		if t.Kind() != reflect.Struct || t.Name() != "MySQLError" || t.PkgPath() != "github.com/go-sql-driver/mysql" {
			continue
		}
		if f := v.Elem().FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
			return uint16(f.Uint()), true
		}
	}
	return 0, false
}

// chain lists err and everything it wraps, depth first, in the order
// errors.As visits them.
func chain(err error, out []error) []error {
	if err == nil {
		return out
	}
	out = append(out, err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return chain(u.Unwrap(), out)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = chain(e, out)
		}
	}
	return out
}
