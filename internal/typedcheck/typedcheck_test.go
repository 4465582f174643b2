package typedcheck

import (
	"reflect"
	"testing"
)

// The sentinel block and fmt.Errorf with %w pass; errors.New in a
// function and fmt.Errorf without %w are reported.
func TestUntyped(t *testing.T) {
	got := Untyped(t, "testdata/bad")
	want := []string{"bad.go:12: errors.New", "bad.go:15: fmt.Errorf"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
