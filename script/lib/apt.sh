# Sourced by script/bootstrap and script/test: installs Debian packages with apt-get.
#
# Another apt-get or dpkg on the machine (unattended-upgrades, a second script/test) holds the
# dpkg and lists locks: apt waits up to 10 minutes for them (DPkg::Lock::Timeout, honoured by
# `update` and `install` since apt 1.9.11; bookworm has 2.6) instead of failing at once.
APT_LOCK_WAIT=(-o DPkg::Lock::Timeout=600)

# apt_install PACKAGE... : apt-get update, then install (with sudo unless root). Quiet; returns
# apt-get's status.
apt_install() {
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  command -v apt-get >/dev/null || return 127
  # `update` takes the lists lock, which DPkg::Lock::Timeout does not cover (apt 2.6: two
  # script/test at once failed at once): tried again every 10 s, up to 10 minutes.
  local tries=0
  until $sudo apt-get "${APT_LOCK_WAIT[@]}" update -qq; do
    tries=$((tries + 1))
    [ "$tries" -lt 60 ] || return 1
    sleep 10
  done
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get "${APT_LOCK_WAIT[@]}" install -y -qq "$@"
}
