package bad

import (
	"errors"
	"fmt"
)

var ErrSentinel = errors.New("bad: sentinel")

func f(n int) error {
	if n == 0 {
		return errors.New("bad: untyped")
	}
	if n == 1 {
		return fmt.Errorf("bad: %d untyped", n)
	}
	return fmt.Errorf("bad: %d: %w", n, ErrSentinel)
}
