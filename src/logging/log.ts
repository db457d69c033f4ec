/**
 * The store's one logger. Every line the program writes about itself (the banner, warnings, status
 * changes of services, reloads, refusals, access lines, shutdown) goes through here, in one style:
 * `--log-format text` (a time, a level, a message) or `json` (one object a line), to stderr.
 *
 * Effect code logs with `Effect.logInfo` / `Effect.logWarning` / ... (annotations with
 * `Effect.annotateLogs` become fields of the JSON line): `StoreLogger` is the Logger that formats
 * them; the server's runtime and `runToPromise` (src/runtime/run.ts) install it. Code outside Effect
 * (XState callbacks, Node callbacks) calls `log.info(...)` etc., which writes the same line.
 *
 * The settings (level, format, where lines go) are the process's: the program sets them once from
 * its options (`configureLogging`); a library user gets info and text on stderr. Tests capture lines
 * with `captureLogs`.
 *
 * A line carries text from outside (an upstream's error message, a command line, a request path):
 * in text format control characters are escaped, so a hostile upstream cannot forge lines, and
 * every message and field is cut at a bounded length.
 */
import { Cause, HashMap, Layer, Logger, LogLevel as EffectLogLevel } from "effect"

/** Levels, as `--log-level` spells them. */
export type LogLevelName = "debug" | "info" | "warning" | "error"
/** Output formats, as `--log-format` spells them. */
export type LogFormat = "text" | "json"
export const LOG_FORMATS: ReadonlyArray<LogFormat> = ["text", "json"]

/** Extra fields of a line (JSON: keys of the object; text: not shown, the message says it). */
export type LogFields = Readonly<Record<string, unknown>>

export interface LogSettings {
  readonly level: LogLevelName
  readonly format: LogFormat
  /** Receives each formatted line, with its trailing newline. */
  readonly write: (line: string) => void
}

const RANK: Readonly<Record<LogLevelName, number>> = { debug: 0, info: 1, warning: 2, error: 3 }
const TEXT_LABEL: Readonly<Record<LogLevelName, string>> = { debug: "DEBUG", info: "INFO ", warning: "WARN ", error: "ERROR" }
const JSON_LABEL: Readonly<Record<LogLevelName, string>> = { debug: "debug", info: "info", warning: "warn", error: "error" }

/** Longest message, field value or cause kept in a line (characters). */
const MAX_TEXT = 4096

/**
 * Whether stderr is gone (its reader went away). A write to a closed pipe fails later, as an `error`
 * event on the stream: with no listener that is an uncaught exception, whose report is one more
 * line, whose write fails again, for ever (the process spins and a SIGTERM never ends it). The
 * logger listens, and writes nothing more once the stream has failed.
 */
let stderrGone = false
let stderrWatched = false
const stderrWrite = (line: string): void => {
  if (stderrGone) return
  if (!stderrWatched) {
    stderrWatched = true
    process.stderr.on("error", () => void (stderrGone = true))
  }
  process.stderr.write(line)
}

let settings: LogSettings = { level: "info", format: "text", write: stderrWrite }

/**
 * Sets the process's log settings (missing keys keep their value). Returns a function that puts the
 * previous settings back.
 */
export const configureLogging = (next: Partial<LogSettings>): (() => void) => {
  const previous = settings
  settings = { ...settings, ...next }
  return () => void (settings = previous)
}

/** The settings in force. */
export const loggingSettings = (): LogSettings => settings

/** Whether a line at `level` would be written (to skip building an expensive message). */
export const logEnabled = (level: LogLevelName): boolean => RANK[level] >= RANK[settings.level]

const cut = (text: string): string => (text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT)}... (${text.length - MAX_TEXT} more characters)` : text)

/** Text format: control characters (newlines first of all) escaped, so one line stays one line. */
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f\u2028\u2029]|\r|\n/g
const escapeControl = (text: string): string =>
  text.replace(CONTROL, (c) => (c === "\n" ? "\\n" : c === "\r" ? "\\r" : `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`))

const fieldValue = (value: unknown): unknown => {
  if (typeof value === "string") return cut(value)
  if (value instanceof Error) return cut(value.message)
  return value
}

/** Formats one line (with its newline) in the current format. */
export const formatLine = (level: LogLevelName, message: string, fields: LogFields | undefined, date: Date, cause?: string): string => {
  if (settings.format === "json") {
    const out: Record<string, unknown> = { time: date.toISOString(), level: JSON_LABEL[level], message: cut(message) }
    if (fields !== undefined) {
      for (const [key, value] of Object.entries(fields)) {
        if (value !== undefined && key !== "time" && key !== "level" && key !== "message") out[key] = fieldValue(value)
      }
    }
    if (cause !== undefined) out.cause = cut(cause)
    return `${safeJson(out)}\n`
  }
  const text = `${date.toISOString()} ${TEXT_LABEL[level]} ${escapeControl(cut(message))}`
  // A cause (a defect's stack) keeps its lines, indented under the line that names it.
  return cause === undefined ? `${text}\n` : `${text}\n${cut(cause).split("\n").map((l) => `    ${escapeControl(l)}`).join("\n")}\n`
}

const safeJson = (value: Record<string, unknown>): string => {
  try {
    return JSON.stringify(value)
  } catch {
    return JSON.stringify({ time: value.time, level: value.level, message: value.message })
  }
}

/** Writes one line at `level` when the level is on. */
export const writeLog = (level: LogLevelName, message: string, fields?: LogFields, cause?: string): void => {
  if (RANK[level] < RANK[settings.level]) return
  try {
    settings.write(formatLine(level, message, fields, new Date(), cause))
  } catch {
    // A log line is never worth a failure of the work that wrote it (a closed stderr, a full pipe).
  }
}

/** Logging for code outside Effect (XState callbacks, Node callbacks): the same lines as Effect's. */
export const log = {
  debug: (message: string, fields?: LogFields): void => writeLog("debug", message, fields),
  info: (message: string, fields?: LogFields): void => writeLog("info", message, fields),
  warn: (message: string, fields?: LogFields): void => writeLog("warning", message, fields),
  error: (message: string, fields?: LogFields, cause?: unknown): void =>
    writeLog("error", message, fields, cause === undefined ? undefined : cause instanceof Error ? (cause.stack ?? cause.message) : String(cause))
} as const

const levelOf = (level: EffectLogLevel.LogLevel): LogLevelName => {
  if (level.ordinal >= EffectLogLevel.Error.ordinal) return "error"
  if (level.ordinal >= EffectLogLevel.Warning.ordinal) return "warning"
  if (level.ordinal >= EffectLogLevel.Info.ordinal) return "info"
  return "debug"
}

const messageText = (message: unknown): string => {
  const parts = Array.isArray(message) ? message : [message]
  return parts.map((part) => (typeof part === "string" ? part : part instanceof Error ? part.message : safeString(part))).join(" ")
}

const safeString = (value: unknown): string => {
  try {
    return typeof value === "object" && value !== null ? JSON.stringify(value) : String(value)
  } catch {
    return String(value)
  }
}

/**
 * The Effect Logger of the store: `Effect.log*` lines in the process's format, filtered by its level
 * (the runtime's minimum level filters too), annotations as fields.
 */
export const StoreLogger: Logger.Logger<unknown, void> = Logger.make(({ logLevel, message, cause, annotations, date }) => {
  const level = levelOf(logLevel)
  if (RANK[level] < RANK[settings.level]) return
  let fields: Record<string, unknown> | undefined
  if (HashMap.size(annotations) > 0) {
    fields = {}
    for (const [key, value] of annotations) fields[key] = value
  }
  writeLog(level, messageText(message), fields, Cause.isEmpty(cause) ? undefined : Cause.pretty(cause, { renderErrorCause: true }))
})

/** Installs `StoreLogger` in place of Effect's default logger (a runtime's layer). */
export const StoreLoggerLive: Layer.Layer<never> = Logger.replace(Logger.defaultLogger, StoreLogger)

/** Captured lines of `captureLogs`. */
export interface CapturedLogs {
  /** Every line written since the capture began, without trailing newlines. */
  readonly lines: ReadonlyArray<string>
  /** Puts the previous settings back. */
  restore(): void
}

/** Captures lines (tests): every line goes to the returned list instead of stderr. */
export const captureLogs = (options: { readonly level?: LogLevelName; readonly format?: LogFormat } = {}): CapturedLogs => {
  const lines: string[] = []
  const restore = configureLogging({
    level: options.level ?? "debug",
    format: options.format ?? "text",
    write: (line) => {
      for (const l of line.replace(/\n$/, "").split("\n")) lines.push(l)
    }
  })
  return { lines, restore }
}
