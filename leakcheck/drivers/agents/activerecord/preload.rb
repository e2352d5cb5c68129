# leakcheck's preloader for a Ruby agent (docs/agent-protocol.md, "Preloaded agents"): as Puma or Unicorn
# fork a booted Rails application's workers (preload_app), the agent's requires are loaded once, in this
# process, and each agent is a fork of it: its own process, session and connections.
#
# Requests come on a SOCK_SEQPACKET socket leakcheck passes as an open file (one message each):
#   "fork TAG" with 3 descriptors (the new agent's stdin, stdout, stderr) -> "PID" once the child has
#     made itself a session (and process group) leader; it sets LEAKCHECK_AGENT=TAG, takes the three as
#     its stdin/stdout/stderr and runs the agent's loop;
#   "reap PID" -> "STATUS" (its exit status, -SIGNAL when killed; "" while it runs): a child stays a
#     zombie until leakcheck asks, so its pid (and process group id) is not reused while leakcheck signals it.
# The end of the socket (leakcheck ended, or stopped this preloader) ends it; its children end with
# the end of their stdin.

require "socket"

module Preload
  def self.serve(fd, name, &agent)
    link = Socket.for_fd(fd)
    GC.start # what the children share stays shared (copy-on-write)
    loop do
      data, _, _, *controls = link.recvmsg(256, 0, nil, scm_rights: true)
      break if data.nil? || data.empty?

      ios = controls.flat_map { |c| c.cmsg_is?(:SOCKET, :RIGHTS) ? c.unix_rights : [] }
      op, arg = data.split(" ", 2)
      link.sendmsg(
        case op
        when "fork" then spawn(link, ios, arg.to_s, name, agent)
        when "reap" then reap(Integer(arg))
        else "error: unknown request #{op}"
        end
      )
    ensure
      ios&.each { |io| io.close unless io.closed? }
    end
  end

  def self.spawn(link, ios, tag, name, agent)
    return "error: fork takes 3 descriptors, got #{ios.size}" unless ios.size == 3

    ready, made = IO.pipe
    pid = fork do
      ready.close
      link.close
      Process.setsid
      made.close # (the parent answers once this end closes: the child leads its own group)
      $stdin.reopen(ios[0])
      $stdout.reopen(ios[1])
      $stderr.reopen(ios[2])
      ios.each(&:close)
      ENV["LEAKCHECK_AGENT"] = tag
      $PROGRAM_NAME = name
      begin
        agent.call
        $stdout.flush
        exit!(0)
      rescue SignalException => e # ended by a signal, as a process that keeps its default handler is
        Signal.trap(e.signo, "DEFAULT")
        Process.kill(e.signo, Process.pid)
        sleep
      rescue Exception => e # rubocop:disable Lint/RescueException
        warn("#{e.class}: #{e.message}")
        exit!(1)
      end
    end
    made.close
    ready.read # its end: the child called setsid (or died)
    ready.close
    pid.to_s
  end

  def self.reap(pid)
    _, status = Process.waitpid2(pid, Process::WNOHANG)
    return "" unless status

    status.signaled? ? (-status.termsig).to_s : status.exitstatus.to_s
  rescue Errno::ECHILD
    "gone"
  end
end
