<?php
// leakcheck agent for PHP PDO pgsql: one client slot, JSON lines on stdin/stdout (agent protocol 1).
//
// query = a statement with PGSQL_ATTR_DISABLE_PREPARES (PQexecParams, the unnamed statement);
// execute = PDO::exec (the simple query protocol); prepared = PDO::prepare cached per SQL text +
// execute() (server statements pdo_stmt_%08x unless ATTR_EMULATE_PREPARES); free = dropping the
// statement object (pdo_pgsql sends DEALLOCATE). PHP runs one request at a time and PDO has no
// cancel, so `cancel` is answered `unsupported` once the request before it has finished; `hello`
// says so at once (no_cancel), so a probe about cancels does not wait for that answer.

final class Usage extends Exception {}

const NO_CANCEL = 'PDO has no cancel and PHP runs one request at a time';

const PARAMETERS = [
    'Client Encoding' => 'client_encoding',
    'Is Superuser' => 'is_superuser',
    'Session Authorization' => 'session_authorization',
    'Date Style' => 'DateStyle',
];

$pdo = null;
$statements = [];

function send(array $answer): void
{
    $flags = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_INVALID_UTF8_SUBSTITUTE;
    fwrite(STDOUT, json_encode($answer, $flags) . "\n");
    fflush(STDOUT);
}

function first_line(string $message): string
{
    return explode("\n", $message, 2)[0];
}

function setting(string $name, string $value): array
{
    $attributes = ['ATTR_EMULATE_PREPARES' => PDO::ATTR_EMULATE_PREPARES,
                   'PGSQL_ATTR_DISABLE_PREPARES' => PDO::PGSQL_ATTR_DISABLE_PREPARES];
    if (!isset($attributes[$name])) {
        throw new Usage("unknown pdo setting $name (known: " . implode(', ', array_keys($attributes)) . ')');
    }
    if ($value !== 'true' && $value !== 'false') {
        throw new Usage("pdo setting $name takes true or false, not $value");
    }
    return [$attributes[$name], $value === 'true'];
}

function connect(array $request): PDO
{
    $options = [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION, PDO::ATTR_TIMEOUT => 10];
    foreach ($request['settings'] ?? [] as $name => $value) {
        [$attribute, $on] = setting((string) $name, (string) $value);
        $options[$attribute] = $on;
    }
    $dsn = sprintf('pgsql:host=%s;port=%d;dbname=%s', $request['host'], $request['port'], $request['dbname']);
    return new PDO($dsn, $request['user'], $request['password'] ?? '', $options);
}

function value(mixed $value, string $type): mixed
{
    if ($value === null) {
        return null;
    }
    if (is_resource($value)) { // bytea comes as a stream: PostgreSQL's hex text form
        return '\\x' . bin2hex(stream_get_contents($value));
    }
    if (str_starts_with($type, '_') && is_string($value)) { // an array type: _int4, _text...
        return array_elements($value, substr($type, 1));
    }
    return match ($type) {
        'int2', 'int4', 'int8' => (int) $value,
        'float4', 'float8' => is_finite((float) $value) ? (float) $value : (string) $value,
        'bool' => is_string($value) ? $value === 't' || $value === '1' : (bool) $value,
        default => (string) $value,
    };
}

/** A PostgreSQL array's text form ({1,"a b",NULL,{2}}) as a list; its elements as scalars of `$type`. */
function array_elements(string $text, string $type): array
{
    $at = strpos($text, '{'); // skips a dimension decoration, [1:2]={...}
    $position = $at === false ? 0 : $at;
    return array_level($text, $position, $type);
}

function array_level(string $text, int &$i, string $type): array
{
    $out = [];
    $i++; // past '{'
    while ($i < strlen($text) && $text[$i] !== '}') {
        if ($text[$i] === ',') {
            $i++;
        } elseif ($text[$i] === '{') {
            $out[] = array_level($text, $i, $type);
        } elseif ($text[$i] === '"') {
            $element = '';
            for ($i++; $text[$i] !== '"'; $i++) {
                $element .= $text[$i] === '\\' ? $text[++$i] : $text[$i];
            }
            $i++;
            $out[] = value($element, $type);
        } else {
            $end = strcspn($text, ',}', $i);
            $element = substr($text, $i, $end);
            $i += $end;
            $out[] = $element === 'NULL' ? null : value($element, $type);
        }
    }
    $i++; // past '}'
    return $out;
}

function rows(PDOStatement $statement): array
{
    $types = [];
    for ($i = 0; $i < $statement->columnCount(); $i++) {
        $types[] = $statement->getColumnMeta($i)['native_type'] ?? '';
    }
    $rows = [];
    while (($row = $statement->fetch(PDO::FETCH_NUM)) !== false) {
        $rows[] = array_map('value', $row, $types);
    }
    return $rows;
}

function run(string $op, array $request, array &$answer): void
{
    global $pdo, $statements;
    switch ($op) {
        case 'hello':
            $libpq = defined('PGSQL_LIBPQ_VERSION') ? ' libpq ' . PGSQL_LIBPQ_VERSION : '';
            $answer += ['protocol' => 1, 'driver' => 'pdo', 'release' => phpversion('pdo_pgsql'),
                        'runtime' => 'php ' . PHP_VERSION . $libpq, 'no_cancel' => NO_CANCEL];
            return;
        case 'connect':
            $pdo = null;
            $statements = [];
            $pdo = connect($request);
            return;
        case 'close':
            $statements = [];
            $pdo = null;
            return;
        case 'exit':
            return;
        case 'cancel':
            throw new Usage('unsupported');
    }
    if ($pdo === null) {
        throw new Usage('not connected: send connect first');
    }
    $sql = (string) ($request['sql'] ?? '');
    switch ($op) {
        case 'query':
            $statement = $pdo->prepare($sql, [PDO::PGSQL_ATTR_DISABLE_PREPARES => true]);
            $statement->execute();
            $answer['rows'] = rows($statement);
            return;
        case 'execute':
            $pdo->exec($sql);
            return;
        case 'prepared':
            $statement = $statements[$sql] ??= $pdo->prepare($sql);
            for ($i = 0; $i < ($request['times'] ?? 1); $i++) {
                $statement->execute();
                $rows = rows($statement);
            }
            $answer['rows'] = $rows ?? [];
            return;
        case 'free':
            unset($statements[$sql]);
            return;
        case 'begin':
            $pdo->beginTransaction();
            return;
        case 'commit':
            $pdo->commit();
            return;
        case 'rollback':
            $pdo->rollBack();
            return;
    }
    throw new Usage("unknown op $op");
}

/** PDO's SQLSTATE; HY000 is PDO's own "none", which for a lost connection becomes 08006. */
function sqlstate(PDOException $e): string
{
    $state = (string) ($e->errorInfo[0] ?? $e->getCode());
    if ($state !== 'HY000') {
        return $state;
    }
    $lost = '/server closed the connection|no connection to the server|could not receive data/';
    return preg_match($lost, $e->getMessage()) ? '08006' : '';
}

/** Pending notifications and the ParameterStatus values PDO shows (ATTR_SERVER_INFO, ATTR_SERVER_VERSION). */
function drain(PDO $pdo, array &$answer): void
{
    $notes = [];
    while (($note = $pdo->pgsqlGetNotify(PDO::FETCH_ASSOC, 0)) !== false) {
        $notes[] = ['channel' => $note['message'], 'payload' => $note['payload'] ?? ''];
    }
    $answer['notifications'] = $notes;
    $parameters = ['server_version' => $pdo->getAttribute(PDO::ATTR_SERVER_VERSION)];
    foreach (explode('; ', $pdo->getAttribute(PDO::ATTR_SERVER_INFO)) as $part) {
        [$label, $value] = explode(': ', $part, 2) + [1 => ''];
        if (isset(PARAMETERS[$label])) {
            $parameters[PARAMETERS[$label]] = $value;
        }
    }
    $answer['parameters'] = $parameters;
}

while (($line = fgets(STDIN)) !== false) {
    if (trim($line) === '') {
        continue;
    }
    $request = json_decode($line, true);
    if (!is_array($request)) {
        send(['id' => null, 'ok' => false, 'error' => ['sqlstate' => '', 'class' => 'usage', 'message' => 'bad request line']]);
        continue;
    }
    $op = (string) ($request['op'] ?? '');
    $answer = ['id' => $request['id'] ?? null, 'ok' => true];
    try {
        run($op, $request, $answer);
    } catch (PDOException $e) {
        $answer = ['id' => $answer['id'], 'ok' => false,
                   'error' => ['sqlstate' => sqlstate($e), 'class' => get_class($e),
                               'message' => first_line($e->getMessage())]];
    } catch (Usage $e) {
        $class = $e->getMessage() === 'unsupported' ? 'unsupported' : 'usage';
        $message = $class === 'unsupported' ? NO_CANCEL : $e->getMessage();
        $answer = ['id' => $answer['id'], 'ok' => false, 'error' => ['sqlstate' => '', 'class' => $class, 'message' => $message]];
    } catch (Throwable $e) { // a request of the wrong shape
        $answer = ['id' => $answer['id'], 'ok' => false,
                   'error' => ['sqlstate' => '', 'class' => get_class($e), 'message' => first_line($e->getMessage())]];
    }
    if ($pdo !== null) {
        try {
            drain($pdo, $answer);
        } catch (PDOException $e) {
            $answer['notifications'] = [];
        }
    }
    send($answer);
    if ($op === 'exit') {
        break;
    }
}
$statements = [];
$pdo = null;
