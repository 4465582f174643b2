module github.com/ferrymsg/ferry

go 1.26
