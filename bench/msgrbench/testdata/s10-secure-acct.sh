#!/bin/bash
# acct.sh PROFILE OPS: flat CPU per op by category, µs
go tool pprof -top -nodecount=100000 msgrbench.test "$1" 2>/dev/null | awk -v ops="$2" '
function us(s) { if (s ~ /ms$/) { sub(/ms$/, "", s); return s * 1000 } if (s ~ /µs$|us$/) { sub(/(µs|us)$/, "", s); return s } sub(/s$/, "", s); return s * 1e6 }
/Total samples/ { for (i = 1; i <= NF; i++) if ($i == "=") tot = us($(i + 1)) }
NF >= 6 && $1 ~ /[0-9](s|ms)$/ {
  f = us($1); name = $6; for (i = 7; i <= NF; i++) name = name " " $i
  if (name ~ /gcmAesEnc|gcmAesFinish|gcmAesData|gcmAesInit/ && name ~ /Enc/) c = "seal"
  else if (name ~ /gcmAesDec/) c = "open"
  else if (name ~ /gcm|aes/) c = "gcm-other"
  else if (name ~ /crc32c/) c = "crc"
  else if (name ~ /memmove/) c = "copy"
  else if (name ~ /memclr/) c = "clear"
  else if (name ~ /Syscall|syscall|futex|epollwait|usleep|nanotime|osyield/) c = "syscalls"
  else if (name ~ /^runtime\./) c = "runtime-other"
  else c = "other"
  a[c] += f
}
END { printf "total %6.0f", tot / ops; n = split("seal open gcm-other crc copy clear syscalls runtime-other other", k, " "); for (i = 1; i <= n; i++) printf "  %s %.0f", k[i], a[k[i]] / ops; printf "\n" }'
