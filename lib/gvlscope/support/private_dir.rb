# frozen_string_literal: true

require_relative "errors"

module GVLScope
  # Directories at names another local user can guess (/tmp/gvlscope-<uid>): whoever makes one
  # first owns what goes in it, so one is used only when it is a real directory of ours that
  # nobody else may write in.
  module PrivateDir
    module_function

    # +dir+, made 0700 when missing. GVLScope::Error (one line) when it exists but must not be used.
    def ensure!(dir)
      begin
        Dir.mkdir(dir, 0o700)
      rescue Errno::EEXIST
        nil
      end
      reason = distrust(dir)
      raise Error, reason if reason

      dir
    rescue SystemCallError => e
      raise Error, "cannot make the directory #{dir}: #{e.message}"
    end

    # Why +dir+ must not be trusted (one line), or nil when it is a directory (not a link) of our
    # effective uid that neither its group nor others may write in.
    def distrust(dir)
      stat = File.lstat(dir)
      return "#{dir} is not a directory" unless stat.directory?
      return "#{dir} belongs to uid #{stat.uid}, not to us (uid #{Process.euid})" unless stat.uid == Process.euid
      return format("%s is writable by others (mode %o)", dir, stat.mode & 0o7777) if stat.mode.anybits?(0o022)

      nil
    rescue SystemCallError => e
      "#{dir}: #{e.message}"
    end
  end
end
