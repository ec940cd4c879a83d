package decimal

import (
	"strconv"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		s      string
		want   uint64
		reason string
	}{
		{"0", 0, ""},
		{"7", 7, ""},
		{"10", 10, ""},
		{"18446744073709551615", 1<<64 - 1, ""},
		{"18446744073709551616", 0, "exceeds the uint64 range"},
		{"99999999999999999999", 0, "exceeds the uint64 range"},
		{"100000000000000000000000000000", 0, "exceeds the uint64 range"},
		{"", 0, "is empty"},
		{"00", 0, "has a leading zero"},
		{"007", 0, "has a leading zero"},
		{"018446744073709551615", 0, "has a leading zero"},
		{"+5", 0, "is not a decimal number"},
		{"-5", 0, "is not a decimal number"},
		{" 5", 0, "is not a decimal number"},
		{"5 ", 0, "is not a decimal number"},
		{"5\t", 0, "is not a decimal number"},
		{"1_000", 0, "is not a decimal number"},
		{"0x10", 0, "is not a decimal number"},
		{"\u0661", 0, "is not a decimal number"},
	} {
		n, reason, ok := Parse(tc.s)
		if n != tc.want || reason != tc.reason || ok != (tc.reason == "") {
			t.Errorf("Parse(%q) = %d, %q, %t; want %d, %q", tc.s, n, reason, ok, tc.want, tc.reason)
		}
	}
}

// Parse accepts exactly the strings strconv.FormatUint writes.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "1", "007", "18446744073709551615", "18446744073709551616", "+1", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, _, ok := Parse(s)
		std, err := strconv.ParseUint(s, 10, 64)
		canonical := err == nil && strconv.FormatUint(std, 10) == s
		if ok != canonical || (ok && n != std) {
			t.Fatalf("Parse(%q) = %d, %t; strconv: %d, %v", s, n, ok, std, err)
		}
	})
}
