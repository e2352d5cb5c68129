# leakcheck agent for ruby-pg: one client slot, JSON lines on stdin/stdout (agent protocol 1).
#
# query = exec_params (the unnamed statement); execute = exec (the simple query protocol);
# prepared = prepare("a#{n}") per SQL text, Rails' names a1, a2... per connection, + exec_prepared;
# free = DEALLOCATE by name, as Rails' statement pool does; cancel = conn.cancel from the stdin
# reader thread while the worker runs the request before it; copy_in = copy_data with put_copy_data (its
# pause ends on a `go`, read by that thread too).

require "pg"
require_relative "protocol" # shared with the activerecord agent

# ruby-pg sends $0 as libpq's fallback_application_name: one name, not the cache folder's path.
$PROGRAM_NAME = "leakcheck-ruby-pg"

# The agent's one connection and the statements it prepared on it.
class Agent
  # A request the caller got wrong (class "usage").
  class Usage < StandardError; end

  # ParameterStatus names PostgreSQL reports; ruby-pg answers them one name at a time.
  REPORTED = %w[application_name client_encoding DateStyle default_transaction_read_only in_hot_standby
                integer_datetimes IntervalStyle is_superuser scram_iterations search_path server_encoding
                server_version session_authorization standard_conforming_strings TimeZone
                pgbouncer.version pgbouncer.pool_mode pgbouncer.max_prepared_statements].freeze
  SETTINGS = PG::Connection.conndefaults.map { |d| d[:keyword] } - %w[host hostaddr port user password dbname]

  def initialize
    @conn = nil
    @names = {}
    @counter = 0
  end

  def answer(request)
    answer = { "id" => request["id"], "ok" => true }
    @went = false
    begin
      run(request["op"].to_s, request, answer)
    rescue PG::Error => e
      answer = Protocol.failure(request["id"], sqlstate(e), e.class.name, e.message)
    rescue Usage => e
      answer = Protocol.failure(request["id"], "", "usage", e.message)
    rescue StandardError => e # a request of the wrong shape
      answer = Protocol.failure(request["id"], "", e.class.name, e.message)
    end
    answer["go"] = true if @went # a copy_in's pause ended on a `go`
    Protocol.drain(answer, @conn, REPORTED) if @conn
    answer
  end

  # PG::Connection#cancel returns once the peer closed the cancel connection (it reads to its end): closed.
  def cancel(id)
    error = @conn&.cancel
    return { "id" => id, "ok" => true, "closed" => true } unless error

    Protocol.failure(id, "", "PG::Connection#cancel", error)
  end

  def close
    @conn&.close
    @conn = nil
    @names = {}
    @counter = 0
  end

  private

  def run(op, request, answer)
    case op
    when "hello"
      answer.merge!("protocol" => 1, "driver" => "ruby-pg", "release" => PG::VERSION,
                    "runtime" => "ruby #{RUBY_VERSION} libpq #{PG.library_version.divmod(10_000).join('.')}",
                    "ops" => ["bind", "copy_in", "go"])
      return
    when "connect" then return connect(request)
    when "close" then return close
    when "exit" then return
    end
    raise Usage, "not connected: send connect first" unless @conn

    sql = request["sql"].to_s
    case op
    when "query" then answer["rows"] = rows(@conn.exec_params(sql, []))
    when "execute" then @conn.exec(sql)
    when "prepared"
      name = @names[sql] ||= "a#{@counter += 1}".tap { |key| @conn.prepare(key, sql) }
      result = nil
      (request["times"] || 1).times { result = @conn.exec_prepared(name, []) }
      answer["rows"] = rows(result)
    when "free"
      name = @names.delete(sql)
      @conn.exec("DEALLOCATE #{name}") if name
    when "bind" then answer["rows"] = rows(@conn.exec_prepared(request["name"].to_s, []))
    when "copy_in" then copy_in(sql, request)
    when "begin" then @conn.exec("BEGIN")
    when "commit" then @conn.exec("COMMIT")
    when "rollback" then @conn.exec("ROLLBACK")
    else raise Usage, "unknown op #{op}"
    end
  end

  def connect(request)
    close
    params = { host: request["host"], port: request["port"], user: request["user"],
               password: request["password"].to_s, dbname: request["dbname"], connect_timeout: 10 }
    (request["settings"] || {}).each do |name, value|
      raise Usage, "unknown ruby-pg (libpq) setting #{name}" unless SETTINGS.include?(name)

      params[name.to_sym] = value
    end
    @conn = PG.connect(params)
  end

  # COPY ... FROM STDIN: the first chunk sent on at once, the rest after the pause (until a `go`, or its bound),
  # then the copy's end (copy_data's put_copy_end; its error raised from get_last_result). @went: whether its
  # pause ended on a `go`.
  def copy_in(sql, request)
    Protocol::PAUSE.arm
    @conn.copy_data(sql) do
      @conn.put_copy_data(request["first"].to_s)
      @conn.flush
      @went = Protocol::PAUSE.wait(request["pause_ms"].to_i / 1000.0)
      rows = request["rows"].to_s
      request["times"].to_i.times { @conn.put_copy_data(rows) }
    end
  end

  def rows(result)
    result.values.map do |row|
      row.each_with_index.map { |value, i| Protocol.value(value, result.ftype(i)) }
    end
  end

  def sqlstate(error)
    state = error.respond_to?(:result) && error.result&.error_field(PG::PG_DIAG_SQLSTATE)
    return state if state
    return "08006" if error.is_a?(PG::ConnectionBad) || error.is_a?(PG::UnableToSend)

    ""
  end
end

Protocol.serve(Agent.new)
