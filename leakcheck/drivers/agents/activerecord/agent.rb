# leakcheck agent for Rails' ActiveRecord (Debian's ruby-activerecord, its postgresql adapter over ruby-pg):
# one client slot, JSON lines on stdin/stdout (agent protocol 1).
#
# As a Rails application, the agent boots once (bootsnap, as every `rails new` application's config/boot.rb
# sets it up, caches Ruby's compiled files beside it) and establishes its pool once for its settings
# (establish_connection: prepared_statements, advisory_locks, libpq's options; again only when a connect
# brings other settings). A probe's client is a new connection of that pool: connect =
# ActiveRecord::Base.connection (a new adapter, which sets its session up as in any Rails application:
# client_min_messages, standard_conforming_strings, timezone UTC, intervalstyle iso_8601, and reads its type
# map from pg_type); close = the pool's disconnect! (the connection closed, the pool kept, as after a fork).
# query and execute = execute(sql) (the simple query protocol, no named statement; query's values read
# from their text form); prepared = select_all("#{sql} LIMIT $1", binds, preparable) (a write: exec_query with
# `RETURNING $1`, as `create` binds its values)
# as a relation's `.limit(n)` sends it: with prepared_statements (the default) through the adapter's
# statement pool, named a1, a2... per connection; without, an unnamed statement with its bind.
# free: ActiveRecord drops only all its statements (clear_cache!), never one: unsupported.
# begin/commit/rollback = begin_db_transaction / commit_db_transaction / exec_rollback_db_transaction.
# cancel = PG::Connection#cancel on the adapter's raw connection, from the stdin reader thread.

require "bootsnap"
# Ruby's compiled files in cache/ beside the agent (written by its first start, at install); a folder this
# user cannot write is left alone, as bootsnap fails where it cannot write a missing entry.
if File.writable?(__dir__)
  Bootsnap.setup(cache_dir: File.join(__dir__, "cache"), development_mode: false, load_path_cache: false,
                 compile_cache_yaml: false, compile_cache_json: false)
end
require "active_record"
require "active_record/connection_adapters/postgresql_adapter" # and ruby-pg with it
require_relative "protocol" # ruby-pg's, shared with the ruby-pg agent

# ruby-pg sends $0 as libpq's fallback_application_name: one name, not the cache folder's path.
$PROGRAM_NAME = "leakcheck-activerecord"
ActiveRecord::Base.logger = nil

# The agent's one ActiveRecord connection.
class Agent
  # A request the caller got wrong (class "usage").
  class Usage < StandardError; end

  # An op ActiveRecord has no API for (class "unsupported").
  class Unsupported < StandardError; end

  REPORTED = %w[application_name client_encoding DateStyle default_transaction_read_only in_hot_standby
                integer_datetimes IntervalStyle is_superuser scram_iterations search_path server_encoding
                server_version session_authorization standard_conforming_strings TimeZone].freeze
  # ActiveRecord's database.yml keys this agent takes, with their defaults
  SETTINGS = { "prepared_statements" => "true", "advisory_locks" => "true", "options" => "" }.freeze
  # the rows a prepared run may return: its `.limit(n)`, bound as $1
  LIMIT = 1000

  def initialize
    @conn = nil
    @raw = nil
    @config = nil # the pool's settings
  end

  def answer(request)
    answer = { "id" => request["id"], "ok" => true }
    begin
      run(request["op"].to_s, request, answer)
    rescue Usage => e
      answer = Protocol.failure(request["id"], "", "usage", e.message)
    rescue Unsupported => e
      answer = Protocol.failure(request["id"], "", "unsupported", e.message)
    rescue StandardError => e # ActiveRecord's error, ruby-pg's as its cause
      answer = Protocol.failure(request["id"], sqlstate(e), e.class.name, e.message)
    end
    Protocol.drain(answer, @raw, REPORTED) if @raw
    answer
  end

  # PG::Connection#cancel returns once the peer closed the cancel connection (it reads to its end): closed.
  def cancel(id)
    raw = @raw
    return Protocol.failure(id, "", "unsupported", "not connected: nothing to cancel") unless raw

    error = raw.cancel
    return { "id" => id, "ok" => true, "closed" => true } unless error

    Protocol.failure(id, "", "PG::Connection#cancel", error)
  end

  def close
    @raw = nil
    @conn = nil
    ActiveRecord::Base.connection_pool.disconnect! if @config
  rescue StandardError
    nil
  end

  private

  def run(op, request, answer)
    case op
    when "hello"
      answer.merge!("protocol" => 1, "driver" => "activerecord", "release" => ActiveRecord::VERSION::STRING,
                    "runtime" => "ruby #{RUBY_VERSION} pg #{PG::VERSION} " \
                                 "libpq #{PG.library_version.divmod(10_000).join('.')}")
      return
    when "connect" then return connect(request)
    when "close" then return close
    when "exit" then return
    end
    raise Usage, "not connected: send connect first" unless @conn

    sql = request["sql"].to_s
    case op
    when "query" then answer["rows"] = texts(@conn.execute(sql))
    when "execute" then @conn.execute(sql).clear
    when "prepared"
      result = nil
      (request["times"] || 1).times { result = prepared(sql) }
      answer["rows"] = rows(result)
    when "free" then raise Unsupported, "ActiveRecord drops all its prepared statements (clear_cache!), never one"
    when "begin" then @conn.begin_db_transaction
    when "commit" then @conn.commit_db_transaction
    when "rollback" then @conn.exec_rollback_db_transaction
    else raise Usage, "unknown op #{op}"
    end
  end

  # A read as a relation's `.limit(n)` sends it (LIMIT bound as $1); a write as `create` sends one, its
  # value bound (`RETURNING $1`): with a bind, ActiveRecord's statement pool prepares it (a1, a2...).
  def prepared(sql)
    text = sql.strip.chomp(";")
    if text.match?(/\A(INSERT|UPDATE|DELETE)\b/i)
      bind = ActiveRecord::Relation::QueryAttribute.new("returned", 1, ActiveModel::Type::Integer.new)
      return @conn.exec_query("#{text} RETURNING $1::int", "SQL", [bind], prepare: true)
    end
    bind = ActiveRecord::Relation::QueryAttribute.new("LIMIT", LIMIT, ActiveModel::Type::Integer.new)
    @conn.select_all("#{text} LIMIT $1", "SQL", [bind], preparable: true)
  end

  def connect(request)
    close
    config = { adapter: "postgresql", host: request["host"], port: request["port"], username: request["user"],
               password: request["password"].to_s, database: request["dbname"], connect_timeout: 10 }
    (request["settings"] || {}).each do |name, value|
      raise Usage, "unknown ActiveRecord setting #{name} (it takes #{SETTINGS.keys.join(', ')})" unless
        SETTINGS.include?(name)
      config[name.to_sym] = value and next if name == "options" # libpq's, passed on as database.yml does
      raise Usage, "ActiveRecord setting #{name}=#{value}: true or false" unless %w[true false].include?(value)

      config[name.to_sym] = value == "true"
    end
    unless config == @config
      @config = nil
      ActiveRecord::Base.establish_connection(config)
      @config = config
    end
    @conn = ActiveRecord::Base.connection
    @raw = @conn.raw_connection
  end

  # A PG::Result's values from their text form (ActiveRecord's decoders would turn numeric 2.50 into 2.5).
  def texts(result)
    result.map_types!(PG::TypeMapAllStrings.new)
    result.values.map { |row| row.each_with_index.map { |text, i| Protocol.value(text, result.ftype(i)) } }
  ensure
    result&.clear
  end

  def rows(result)
    types = result.column_types
    result.rows.map do |row|
      row.each_with_index.map do |value, i|
        type = types[result.columns[i]]
        value = type.deserialize(value) if value.is_a?(String) && type.respond_to?(:subtype) # an array
        json(value)
      end
    end
  end

  def json(value)
    case value
    when nil, true, false, Integer, String then value
    when Float then value.finite? ? value : (value.nan? ? "NaN" : (value.positive? ? "Infinity" : "-Infinity"))
    when Array then value.map { |e| json(e) }
    else value.to_s
    end
  end

  def sqlstate(error)
    cause = error.is_a?(PG::Error) ? error : error.cause
    state = cause.respond_to?(:result) && cause.result&.error_field(PG::PG_DIAG_SQLSTATE)
    return state if state
    return "08006" if cause.is_a?(PG::ConnectionBad) || cause.is_a?(PG::UnableToSend) ||
                      error.is_a?(ActiveRecord::ConnectionNotEstablished)

    ""
  end
end

# `--preload FD`: the preloader (preload.rb): each agent a fork of this process, its requires loaded once.
if ARGV.first == "--preload"
  require_relative "preload"
  # What a fork's first connect and first relation would load (20 files, ~15 ms of CPU each fork), loaded once
  # here, never connecting: ActiveRecord's eager autoloads, as a production Rails application boots
  # (config.eager_load), and the classes a pool's first connection autoloads.
  ActiveRecord.eager_load!
  [ActiveSupport::ForkTracker, ActiveRecord::ConnectionAdapters::PoolConfig,
   ActiveRecord::ConnectionAdapters::LegacyPoolManager, ActiveRecord::ConnectionAdapters::SchemaCache,
   ActiveRecord::ConnectionAdapters::TransactionManager].each(&:name)
  $PROGRAM_NAME = "leakcheck-activerecord-preloader"
  Preload.serve(Integer(ARGV[1]), "leakcheck-activerecord") { Protocol.serve(Agent.new) }
else
  Protocol.serve(Agent.new)
end
