# What leakcheck's Ruby agents share (ruby-pg/ and activerecord/ run this file beside their agent.rb):
# agent protocol 1's failure answers and its request loop, JSON lines on stdin/stdout, a cancel acted on
# at once by the stdin reader thread while the main thread runs the request before it.

require "json"

module Protocol
  OUT = Mutex.new

  # A failure answer: its SQLSTATE ("" for none), its class, the first line of its message.
  def self.failure(id, sqlstate, klass, message)
    { "id" => id, "ok" => false,
      "error" => { "sqlstate" => sqlstate, "class" => klass, "message" => message.to_s.lines.first.to_s.chomp } }
  end

  def self.send_line(answer)
    OUT.synchronize do
      $stdout.write("#{JSON.generate(answer)}\n")
      $stdout.flush
    end
  end

  # Answer stdin's requests (agent.answer, agent.cancel) until exit or its end, then agent.close.
  def self.serve(agent)
    queue = Queue.new
    Thread.new do
      $stdin.each_line do |line|
        next if line.strip.empty?

        request = begin
          JSON.parse(line)
        rescue JSON::ParserError => e
          send_line(failure(nil, "", "usage", e.message))
          next
        end
        request["op"] == "cancel" ? send_line(agent.cancel(request["id"])) : queue << request
      end
      queue << nil
    end

    while (request = queue.pop)
      send_line(agent.answer(request))
      break if request["op"] == "exit"
    end
    agent.close
  end
end
