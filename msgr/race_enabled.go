//go:build race

package msgr

const raceEnabled = true
