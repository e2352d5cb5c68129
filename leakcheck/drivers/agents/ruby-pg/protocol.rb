# What leakcheck's Ruby agents share (ruby-pg/ and activerecord/ run this file beside their agent.rb):
# agent protocol 1's failure answers and its request loop, JSON lines on stdin/stdout, a cancel and a go acted
# on at once by the stdin reader thread while the main thread runs the request before it; a value from its
# text form, and the notifications and ParameterStatus values of ruby-pg's connection after each answer.

require "json"
require "pg"

module Protocol
  OUT = Mutex.new
  INTEGERS = [20, 21, 23].freeze # int8, int2, int4
  FLOATS = [700, 701].freeze # float4, float8
  # array type oid -> its element type's oid (bool, int2, int4, int8, float4, float8, text, name, varchar, bpchar)
  ARRAYS = { 1000 => 16, 1005 => 21, 1007 => 23, 1016 => 20, 1021 => 700, 1022 => 701, 1009 => 25,
             1003 => 19, 1015 => 1043, 1014 => 1042 }.freeze

  # A failure answer: its SQLSTATE ("" for none), its class, the first line of its message.
  def self.failure(id, sqlstate, klass, message)
    { "id" => id, "ok" => false,
      "error" => { "sqlstate" => sqlstate, "class" => klass, "message" => message.to_s.lines.first.to_s.chomp } }
  end

  # A value of type `oid` from PostgreSQL's text form (an array's elements, nested for more dimensions, as
  # scalars of the element type).
  def self.value(text, oid)
    return nil if text.nil?
    return elements(PG::TextDecoder::Array.new.decode(text), ARRAYS[oid]) if ARRAYS.include?(oid)
    return text.to_i if INTEGERS.include?(oid)
    return (text =~ /\A-?[\d.e+-]+\z/i ? text.to_f : text) if FLOATS.include?(oid)
    return text == "t" if oid == 16

    text
  end

  def self.elements(decoded, oid)
    decoded.map { |e| e.is_a?(Array) ? elements(e, oid) : value(e, oid) }
  end

  # The notifications and the `reported` ParameterStatus values of ruby-pg's `conn`, into `answer`.
  def self.drain(answer, conn, reported)
    notes = []
    conn.consume_input
    while (note = conn.notifies)
      notes << { "channel" => note[:relname], "payload" => note[:extra] }
    end
    answer["notifications"] = notes
    answer["parameters"] = reported.to_h { |name| [name, conn.parameter_status(name)] }.compact
  rescue PG::Error
    answer["notifications"] = notes
  end

  # The pause of the copy_in now running (a `go` ends it: `open`; with none running, nothing happens).
  class Pause
    def initialize
      @lock = Mutex.new
      @opened = ConditionVariable.new
      @armed = false
      @open = false
    end

    # From now on a `go` ends the pause `wait` waits.
    def arm
      @lock.synchronize { @armed, @open = true, false }
    end

    def open
      @lock.synchronize do
        @open = true if @armed
        @opened.signal
      end
    end

    # Waits until a `go` or `seconds` passed; whether it ended on a `go`.
    def wait(seconds)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
      @lock.synchronize do
        until @open || (left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)) <= 0
          @opened.wait(@lock, left)
        end
        @armed = false
        @open
      end
    end
  end

  PAUSE = Pause.new

  def self.send_line(answer)
    OUT.synchronize do
      $stdout.write("#{JSON.generate(answer)}\n")
      $stdout.flush
    end
  end

  # Answer stdin's requests (agent.answer, agent.cancel; a `go` ends PAUSE) until exit or its end, then agent.close.
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
        case request["op"]
        when "cancel" then send_line(agent.cancel(request["id"]))
        when "go"
          PAUSE.open
          send_line({ "id" => request["id"], "ok" => true })
        else queue << request
        end
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
