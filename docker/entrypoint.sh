#!/bin/sh
# Burrow image entry point: the first argument names the service; the rest are its flags.
# Every flag can also be given as an environment variable BURROW_<SERVICE>_<FIELD>.
set -eu

usage() {
    cat <<'USAGE'
usage: IMAGE SERVICE [flags...]
  mailbox   burrow-mailbox  wormhole rendezvous mailbox   (ws 4000, admin 9400)
  transit   burrow-transit  transit relay                 (tcp 4001, ws 4002, admin 9401)
  relay     burrow-relay    DERP packet relay + STUN      (https 8443, udp 3478, admin 9402;
                            QAD udp 7842 with --qad-port, messaging tcp with --messaging-port)
  discovery burrow-discovery messaging discovery          (http 4003, admin 9403)
  report    burrow-report   Spark report (report image only)
  burrow    the reference client, e.g. `burrow send FILE`
  any other command is run as given (e.g. `sh`).
Run `IMAGE SERVICE --help` for a service's flags and their BURROW_* variables.
USAGE
}

if [ "$#" -eq 0 ]; then
    usage
    exit 2
fi
command="$1"
shift
case "$command" in
    mailbox | transit | relay | discovery | report)
        exec "burrow-$command" "$@" ;;
    burrow | client)
        exec burrow "$@" ;;
    help | -h | --help)
        usage ;;
    *)
        exec "$command" "$@" ;;
esac
