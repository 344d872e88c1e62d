# frozen_string_literal: true

require "tempfile"
require_relative "errors"

module GVLScope
  # The one rule for every file a command writes at a path given to it (report --html, export,
  # run --html/--format, lab all --write, the lab's traces, top --log):
  # - a file that exists is refused unless +force+ (the refusal names the option to change);
  # - one of the command's +inputs+ is refused even with +force+, however it is spelled (the same
  #   file: a symlink, ./x, a hard link);
  # - the bytes go to a new temporary file beside the path, put in place whole (a link when
  #   nothing may be replaced: it fails rather than replace a file that appeared meanwhile; a
  #   rename with +force+);
  # - a failure removes that temporary file only: never a file that was there before.
  module OutputFile
    module_function

    # What a write to the output can fail with once it is open (a full disk, a quota, a device error).
    WRITE_ERRORS = [Errno::ENOSPC, Errno::EDQUOT, Errno::EFBIG, Errno::EIO].freeze

    # Raises GVLScope::Error when +path+ may not be written; +option+ names where the path came
    # from in the message ("-o", "--html"). Called before the work, so a clash fails at once.
    def check!(path, inputs: [], force: false, option: nil)
      inputs.compact.each do |input|
        next unless same_file?(path, input)

        raise Error, "#{path} is the input #{input} (the same file): choose another #{option || 'output'}"
      end
      return if force || !taken?(path)

      raise Error, "#{path} already exists: remove it, #{option ? "choose another #{option}, " : ''}or add --force"
    end

    # Writes +path+ by yielding an IO open on a temporary file beside it, then puts the file in
    # place. The IO is binary unless +text+. A failure of the output is GVLScope::Error naming the
    # path and the system's reason; any other exception from the block passes through. Either
    # way only the temporary file is removed.
    def write(path, inputs: [], force: false, option: nil, text: false)
      check!(path, inputs: inputs, force: force, option: option)
      temporary = create_beside(path, text: text)
      begin
        begin
          yield temporary
          temporary.close
        rescue *WRITE_ERRORS => e # the output's; any other error is the work's (reading a trace) and passes through
          raise Error, "cannot write #{path}: #{reason(e)}"
        end
        begin
          place(temporary.path, path, inputs: inputs, force: force, option: option)
        rescue SystemCallError => e
          raise Error, "cannot write #{path}: #{reason(e)}"
        end
      rescue Exception # rubocop:disable Lint/RescueException -- an Interrupt too must not leave the temporary file
        temporary.close unless temporary.closed?
        remove(temporary.path)
        raise
      end
      path
    end

    # A new file at +path+, open for a stream written as it goes (a program's log, which can be
    # followed while it grows): created beside it and put in place at once, under the same rule.
    def create(path, inputs: [], force: false, option: nil)
      check!(path, inputs: inputs, force: force, option: option)
      temporary = create_beside(path, text: true)
      begin
        place(temporary.path, path, inputs: inputs, force: force, option: option)
      rescue Exception # rubocop:disable Lint/RescueException
        temporary.close
        remove(temporary.path)
        raise
      end
      temporary
    end

    # True when +a+ and +b+ name one file: the same device and inode when both exist, else the
    # same absolute path.
    def same_file?(a, b)
      first = stat(a)
      second = stat(b)
      return first.dev == second.dev && first.ino == second.ino if first && second

      File.expand_path(a) == File.expand_path(b)
    end

    # A path is taken by anything there: a file, a directory, a symlink (even a dangling one).
    def taken?(path) = File.exist?(path) || File.symlink?(path)

    def stat(path)
      File.stat(path)
    rescue SystemCallError
      nil
    end

    # O_EXCL, mode 0600 (Tempfile): a name nobody can have planted a link at. The mode a new file
    # gets (0666 less the umask) is given before anything is written.
    def create_beside(path, text:)
      dir = File.dirname(path)
      file = Tempfile.create([".#{File.basename(path)}.", ".tmp"], dir, binmode: !text)
      file.chmod(0o666 & ~File.umask)
      file
    rescue SystemCallError => e
      why = reason(e)
      why += " (no directory #{dir})" if e.is_a?(Errno::ENOENT) && !File.directory?(dir)
      raise Error, "cannot write #{path}: #{why}"
    end

    # Puts the whole temporary file at +path+. Without +force+ a hard link, which fails if
    # anything took the path since the check (a rename would replace it); where the file system
    # has no hard links, a rename after checking again. The inputs are checked again too: the
    # path may have become a link to one.
    def place(temporary, path, inputs:, force:, option:)
      check!(path, inputs: inputs, force: force, option: option)
      if force
        File.rename(temporary, path)
        return
      end
      begin
        File.link(temporary, path)
        File.unlink(temporary)
      rescue Errno::EEXIST
        check!(path, option: option) # raises: it exists now
        raise
      rescue Errno::EPERM, Errno::EOPNOTSUPP, Errno::EXDEV, NotImplementedError
        check!(path, option: option)
        File.rename(temporary, path)
      end
    end

    def remove(path)
      File.unlink(path)
    rescue SystemCallError
      nil # already gone (renamed into place, or never made)
    end

    # The system's words, not Ruby's ("No such file or directory", not "... @ rb_sysopen - path").
    def reason(error)
      error.message.sub(/ @ .*\z/m, "").sub(/ - .*\z/m, "")
    end
  end
end
