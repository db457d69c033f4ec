/**
 * The stdio transport for local services. The SDK's own StdioClientTransport ends only the direct
 * child and keeps no stderr, but a local service started through `npx` or a shell has grandchildren,
 * and its stderr is what a person needs to see when it fails. This transport runs the child as the
 * leader of its own process group, always ends the whole group, and keeps the last lines of stderr.
 * One stdout line (one message) is read up to `maxMessageBytes`: a longer one stops the reading,
 * is reported as `MessageTooLargeError`, and ends the process (the SDK's reader would end the
 * connection at 10 MiB whatever the store's limit, with a message that names no cause). What the
 * child has not read of its input is bounded the same way: past `maxMessageBytes` waiting to be
 * written, a message is refused, not queued in memory for a process that may never read it.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { StringDecoder } from "node:string_decoder"
import type { JSONRPCMessage, MessageExtraInfo, Transport } from "@modelcontextprotocol/client"
import { serializeMessage } from "@modelcontextprotocol/server"
import { JSONRPCMessageSchema } from "@modelcontextprotocol/core"
import { DEFAULT_MAX_MESSAGE_BYTES, MessageTooLargeError, type AnswerMalformed, type ProcessLedger } from "./types.js"

/** Variables a child inherits from the parent (the SDK's safe list); the definition's `env` is added on top. */
export const INHERITED_ENV_VARS: ReadonlyArray<string> = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"]

/** Lines of stderr kept by default. */
export const DEFAULT_STDERR_LINES = 200

/** How long `close()` waits after SIGTERM before SIGKILL, by default. */
export const DEFAULT_GRACE_MS = 2_000

/** Longest stderr line kept; the rest of a longer line is dropped (a process that never writes a newline). */
const MAX_LINE_LENGTH = 4_096

/** What to run, and how. */
export interface StdioProcessOptions {
  readonly command: string
  readonly args?: ReadonlyArray<string>
  /** Added to the inherited variables (and wins over them). */
  readonly env?: Readonly<Record<string, string>>
  readonly cwd?: string | undefined
  /** How long `close()` waits after SIGTERM before SIGKILL. */
  readonly graceMs?: number
  /** How many stderr lines to keep. */
  readonly stderrLines?: number
  /** The longest stdout line (one message) read; default `DEFAULT_MAX_MESSAGE_BYTES`. */
  readonly maxMessageBytes?: number | undefined
  /** Told of the child's process group when it starts and once it has ended. */
  readonly ledger?: ProcessLedger | undefined
}

/** How the child ended: an exit code, a signal, or a failure to start. */
export type ProcessExit =
  | { readonly kind: "exited"; readonly code: number | null; readonly signal: NodeJS.Signals | null }
  | { readonly kind: "spawn_failed"; readonly error: Error }

/** The environment a child gets: the inherited safe variables of this process plus `extra`. */
export const childEnvironment = (extra: Readonly<Record<string, string>> = {}): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const key of INHERITED_ENV_VARS) {
    const value = process.env[key]
    // A value starting with "()" is an exported shell function: never pass those on.
    if (value !== undefined && !value.startsWith("()")) env[key] = value
  }
  return { ...env, ...extra }
}

/**
 * A spawn option Node refused (`ERR_INVALID_ARG_*`: a NUL in a value, say), named without its value:
 * Node's message quotes the value, which may be a secret of the environment.
 */
const withoutValue = (command: string, error: Error): Error => {
  const code = (error as NodeJS.ErrnoException).code
  if (code === undefined || !code.startsWith("ERR_INVALID_ARG_")) return error
  const option = /^The (?:property|argument) '(.*?)' (?:must|is|of)/s.exec(error.message)?.[1]?.replace(/\0/g, "\\0").slice(0, 200)
  const what = command.includes("\0") ? "spawn" : `spawn ${command}`
  return Object.assign(new Error(`${what}: ${option === undefined ? "an option" : `the option ${option}`} was refused (a NUL, or a value of the wrong type)`), { code })
}

/** A human sentence for how a process ended, e.g. "exited with code 3" or "was killed by SIGKILL". */
export const describeExit = (exit: ProcessExit | undefined): string => {
  if (exit === undefined) return "is still running"
  if (exit.kind === "spawn_failed") return `could not be started (${exit.error.message})`
  if (exit.signal !== null) return `was killed by ${exit.signal}`
  return `exited with code ${exit.code ?? "unknown"}`
}

/**
 * The last `capacity` lines of a text stream. Chunks are split on newlines; a partial last line is
 * held until its newline (or `end()`) arrives, and is shown by `lines()` meanwhile.
 */
export class LineRing {
  private readonly ring: Array<string> = []
  private partial = ""

  constructor(readonly capacity: number = DEFAULT_STDERR_LINES) {}

  /** Adds a chunk of text. */
  push(chunk: string): void {
    const parts = (this.partial + chunk).split("\n")
    this.partial = clip(parts.pop() ?? "")
    // Only the last `capacity` lines of a chunk can stay: a flood of lines costs a split, not a copy per line.
    for (const line of parts.length > this.capacity ? parts.slice(-this.capacity) : parts) this.add(line)
  }

  /** Ends the stream: a held partial line becomes a line. */
  end(): void {
    if (this.partial !== "") this.add(this.partial)
    this.partial = ""
  }

  /** The kept lines, oldest first, with the partial last line if there is one. */
  lines(): ReadonlyArray<string> {
    return (this.partial === "" ? this.ring : [...this.ring, this.partial]).slice(-this.capacity)
  }

  private add(line: string): void {
    this.ring.push(clip(line.replace(/\r$/, "")))
    // Dropped in batches of a capacity at a time (one copy per `capacity` lines, not one per line).
    if (this.ring.length >= 2 * this.capacity) this.ring.splice(0, this.ring.length - this.capacity)
  }
}

const clip = (line: string): string => (line.length > MAX_LINE_LENGTH ? line.slice(0, MAX_LINE_LENGTH) : line)

/** Sends a signal to a whole process group; never throws (a group that is gone is fine). */
export const signalGroup = (pgid: number, signal: NodeJS.Signals): void => {
  try {
    process.kill(-pgid, signal)
  } catch {
    // ESRCH: the group is already gone. EPERM: nothing we may do about it.
  }
}

/**
 * Whether a process group still has a running member. A zombie does not count (it has ended; an
 * orphan's zombie may never be reaped where init does not reap). Linux reads /proc; elsewhere a
 * group that still answers `kill(-pgid, 0)` counts as running.
 */
export const groupRunning = (pgid: number): boolean => {
  try {
    process.kill(-pgid, 0)
  } catch {
    return false
  }
  if (process.platform !== "linux") return true
  try {
    for (const entry of readdirSync("/proc")) {
      if (entry.charCodeAt(0) < 48 || entry.charCodeAt(0) > 57) continue
      let stat: string
      try {
        stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      } catch {
        continue // ended meanwhile
      }
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      if (Number(fields[2]) === pgid && fields[0] !== "Z") return true
    }
    return false
  } catch {
    return true
  }
}

/** Resolves true once no member of the group runs any more, false when one still does after `ms` (SIGKILL is asynchronous). */
const groupGone = async (pgid: number, ms: number): Promise<boolean> => {
  const end = Date.now() + ms
  for (;;) {
    if (!groupRunning(pgid)) return true
    if (Date.now() >= end) return false
    await new Promise((r) => setTimeout(r, 5))
  }
}

/**
 * Splits a byte stream into lines (LF; a CR before it is dropped), each at most `maxBytes`. The
 * pieces of an unfinished line are kept as they came, so a long line over many chunks is read in
 * linear time; `push` throws `MessageTooLargeError` as soon as a line is longer than the limit.
 */
export class LineSplitter {
  private pieces: Array<Buffer> = []
  private bytes = 0

  constructor(private readonly maxBytes: number) {}

  /** The lines that `chunk` completes, in order. */
  push(chunk: Buffer): Array<string> {
    const lines: Array<string> = []
    let pos = 0
    for (;;) {
      const end = chunk.indexOf(10, pos)
      const piece = chunk.subarray(pos, end < 0 ? chunk.length : end)
      this.bytes += piece.length
      if (this.bytes > this.maxBytes) {
        this.clear()
        throw new MessageTooLargeError("a line on stdout", this.maxBytes)
      }
      if (end < 0) {
        if (piece.length > 0) this.pieces.push(piece)
        return lines
      }
      const line = this.pieces.length === 0 ? piece.toString("utf8") : Buffer.concat([...this.pieces, piece]).toString("utf8")
      lines.push(line.endsWith("\r") ? line.slice(0, -1) : line)
      this.clear()
      pos = end + 1
    }
  }

  clear(): void {
    this.pieces = []
    this.bytes = 0
  }
}

const RESULT_KEYS: ReadonlySet<string> = new Set(["jsonrpc", "id", "result"])

/**
 * A result's `_meta` the schema keeps as it is: a plain object (no own `__proto__` key) whose
 * `progressToken`, if any, is a string or a number, without the related-task key (its shape is
 * the schema's to read). A 2026-07-28 server puts its identity in every result's `_meta`: kept as
 * sent, where SDK v2's schema would drop its unknown keys (or all of it, when malformed): the
 * engine takes the era's keys off every result (session.ts), and the era probe reads the identity
 * with checks of its own (era.ts).
 */
const plainMeta = (meta: unknown): boolean => {
  if (typeof meta !== "object" || meta === null || Array.isArray(meta) || Object.getPrototypeOf(meta) !== Object.prototype || Object.hasOwn(meta, "__proto__")) return false
  const m = meta as Record<string, unknown>
  const token = m["progressToken"]
  return (token === undefined || typeof token === "string" || typeof token === "number") && !("io.modelcontextprotocol/related-task" in m)
}

/** The request id a line that is not a valid message answers (a JSON object with an id and no method), if any. */
const answeredId = (line: string): string | number | undefined => {
  try {
    const value: unknown = JSON.parse(line)
    if (typeof value !== "object" || value === null || Array.isArray(value) || "method" in value) return undefined
    const id = (value as { id?: unknown }).id
    return typeof id === "string" || Number.isInteger(id) ? (id as string | number) : undefined
  } catch {
    return undefined
  }
}

/**
 * A stdout line as the SDK's `deserializeMessage` reads it (JSON, then its JSON-RPC message
 * schema). The common message, a result with no `_meta` or a plain one, is one the schema returns
 * unchanged: it is checked by hand, without the schema's union of four message kinds; anything
 * else goes through the schema.
 */
export const readMessage = (line: string): JSONRPCMessage => {
  const value: unknown = JSON.parse(line)
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const m = value as Record<string, unknown>
    const { id, result } = m
    let plain = m["jsonrpc"] === "2.0" && (typeof id === "string" || Number.isInteger(id))
    if (plain) for (const key in m) if (!RESULT_KEYS.has(key)) plain = false
    if (plain && typeof result === "object" && result !== null && !Array.isArray(result) && (!("_meta" in result) || plainMeta((result as { _meta: unknown })._meta))) {
      return value as JSONRPCMessage
    }
  }
  return JSONRPCMessageSchema.parse(value)
}

/**
 * An MCP client transport over a child process's stdin/stdout. The child leads its own process group
 * (`detached: true`), so `close()` and the end of the child reach every process it started.
 */
export class StdioProcessTransport implements Transport {
  onclose?: (() => void) | undefined
  onerror?: ((error: Error) => void) | undefined
  onmessage?: (<T extends JSONRPCMessage>(message: T, extra?: MessageExtraInfo) => void) | undefined

  private readonly lines: LineSplitter
  /** The most bytes left waiting for the child to read before a message is refused (`send`). */
  private readonly maxUnread: number
  /** Set once a line was over the limit: nothing more is read. */
  private tooLarge = false
  private readonly stderr: LineRing
  private readonly decoder = new StringDecoder("utf8")
  private readonly graceMs: number
  private child: ChildProcessWithoutNullStreams | undefined
  private exitInfo: ProcessExit | undefined
  private closeRequested = false
  private closing: Promise<void> | undefined
  private finished = false
  private readonly exitWaiters = new Set<() => void>()
  private readonly finishWaiters = new Set<() => void>()
  private readonly timers = new Set<NodeJS.Timeout>()

  constructor(private readonly options: StdioProcessOptions) {
    this.graceMs = options.graceMs ?? DEFAULT_GRACE_MS
    this.stderr = new LineRing(options.stderrLines ?? DEFAULT_STDERR_LINES)
    this.maxUnread = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES
    this.lines = new LineSplitter(this.maxUnread)
  }

  /** The child's process id (also its process group id) once started. */
  get pid(): number | undefined {
    return this.child?.pid
  }

  /** How the child ended, or undefined while it runs (or before start). */
  get exit(): ProcessExit | undefined {
    return this.exitInfo
  }

  /** Whether the child ended before `close()` was asked for (it died, or failed to start). */
  get endedByItself(): boolean {
    return this.exitInfo !== undefined && !this.closeRequested
  }

  /** The last stderr lines, oldest first. */
  stderrTail(): ReadonlyArray<string> {
    return this.stderr.lines()
  }

  /** Spawns the child; resolves once it runs, rejects when it cannot be started (e.g. ENOENT). */
  start(): Promise<void> {
    if (this.child !== undefined || this.exitInfo !== undefined) {
      return Promise.reject(new Error("StdioProcessTransport already started"))
    }
    return new Promise<void>((resolve, reject) => {
      const { command, args = [], env, cwd } = this.options
      let child: ChildProcessWithoutNullStreams
      try {
        child = spawn(command, [...args], {
          detached: true,
          stdio: ["pipe", "pipe", "pipe"],
          env: childEnvironment(env),
          ...(cwd !== undefined ? { cwd } : {}),
          windowsHide: true
        })
      } catch (cause) {
        const error = withoutValue(command, cause instanceof Error ? cause : new Error(String(cause)))
        this.exitInfo = { kind: "spawn_failed", error }
        this.onerror?.(error)
        this.finish()
        reject(error)
        return
      }
      this.child = child
      let spawned = false
      child.once("spawn", () => {
        spawned = true
        if (child.pid !== undefined) this.options.ledger?.started(child.pid, command)
        resolve()
      })
      child.on("error", (cause) => {
        if (spawned) {
          this.onerror?.(cause)
          return
        }
        const error = this.explainSpawnError(cause)
        this.exitInfo = { kind: "spawn_failed", error }
        this.onerror?.(error)
        reject(error)
        this.notifyExit()
        this.finish()
      })
      child.once("exit", (code, signal) => {
        this.exitInfo = { kind: "exited", code, signal }
        this.notifyExit()
        if (!this.closeRequested) this.reapGroupAfterExit(child)
      })
      child.once("close", () => this.finish())
      child.stdout.on("data", (chunk: Buffer) => this.onStdout(chunk))
      child.stderr.on("data", (chunk: Buffer) => this.stderr.push(this.decoder.write(chunk)))
      child.stderr.on("end", () => this.stderr.push(this.decoder.end()))
      // EPIPE and friends once the child is gone; the exit itself is reported through onclose.
      child.stdin.on("error", (error) => this.onerror?.(error))
      child.stdout.on("error", (error) => this.onerror?.(error))
      child.stderr.on("error", (error) => this.onerror?.(error))
    })
  }

  /**
   * Writes one JSON-RPC message to the child's stdin. Messages sent during the same turn of the
   * event loop (calls that came in on several sockets) leave in one write at its end: one system
   * call and one wake-up of the child instead of one each. Refused while more than `maxUnread`
   * bytes wait for the child to read them: a child that stops reading its input (stuck, or hostile)
   * fails its calls and health checks at once instead of growing the store's memory with each.
   */
  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.child?.stdin
    if (stdin === undefined || !stdin.writable || this.exitInfo !== undefined || this.closeRequested) {
      return Promise.reject(new Error(`Not connected: the process ${describeExit(this.exitInfo)}`))
    }
    if (stdin.writableLength > this.maxUnread) {
      return Promise.reject(new Error(`the process does not read its input: ${(stdin.writableLength / 1024 / 1024).toFixed(1)} MiB wait to be written to it, more than --max-message-bytes allows; the message is not sent`))
    }
    if (stdin.writableCorked === 0) {
      stdin.cork()
      setImmediate(() => stdin.uncork())
    }
    return new Promise<void>((resolve, reject) => {
      stdin.write(serializeMessage(message), (error) => (error ? reject(error) : resolve()))
    })
  }

  /**
   * Ends the whole process group: SIGTERM, then SIGKILL after the grace period. Whatever is left of
   * the group once the child has exited is killed too. Resolves when the child has exited; never rejects.
   */
  close(): Promise<void> {
    this.closing ??= this.terminate()
    return this.closing
  }

  /** Resolves true once the child has exited (false if it has not within `ms`). */
  waitForExit(ms: number): Promise<boolean> {
    if (this.exitInfo !== undefined) return Promise.resolve(true)
    return this.waitFor(this.exitWaiters, ms)
  }

  private async terminate(): Promise<void> {
    this.closeRequested = true
    const child = this.child
    const pid = child?.pid
    if (child === undefined || pid === undefined) {
      this.finish()
      return
    }
    try {
      child.stdin.end()
    } catch {
      // The pipe may already be broken.
    }
    if (this.exitInfo === undefined) {
      signalGroup(pid, "SIGTERM")
      if (!(await this.waitForExit(this.graceMs))) {
        signalGroup(pid, "SIGKILL")
        await this.waitForExit(this.graceMs)
      }
    }
    // The group got SIGTERM together with the child; what is still there now is a straggler.
    signalGroup(pid, "SIGKILL")
    // kill() returns before the processes are gone: close() resolves only once the tree has ended.
    // A member still there (stuck in the kernel, not reaped yet) keeps the group on the ledger: the next start ends it.
    if (await groupGone(pid, this.graceMs)) this.options.ledger?.ended(pid)
    if (!(await this.waitFor(this.finishWaiters, 500, () => this.finished))) this.forceFinish()
  }

  /** The child ended on its own: end the rest of its group too (SIGTERM now, SIGKILL after the grace period). */
  private reapGroupAfterExit(child: ChildProcessWithoutNullStreams): void {
    const pid = child.pid
    if (pid === undefined) return
    signalGroup(pid, "SIGTERM")
    // Not cancelled by finish(): a straggler that ignores SIGTERM may have closed its pipes already.
    setTimeout(() => {
      signalGroup(pid, "SIGKILL")
      void groupGone(pid, this.graceMs).then((gone) => {
        if (gone) this.options.ledger?.ended(pid)
      })
    }, this.graceMs).unref()
    // A process that left the group could keep the pipes open: do not wait for it forever.
    this.later(this.graceMs + 500, () => this.forceFinish())
  }

  private onStdout(chunk: Buffer): void {
    if (this.tooLarge) return
    let lines: Array<string>
    try {
      lines = this.lines.push(chunk)
    } catch (error) {
      // Stop reading at once (the pipe fills and the child blocks), report, and end the process:
      // the stream cannot be resynchronized past a message we did not read.
      this.tooLarge = true
      this.child?.stdout.pause()
      this.onerror?.(error instanceof Error ? error : new Error(String(error)))
      void this.close()
      return
    }
    for (const line of lines) {
      let message: JSONRPCMessage
      try {
        message = readMessage(line)
      } catch (error) {
        // Report the bad line and go on with the next one; one in a request's name fails that request.
        const problem = `Invalid message on stdout: ${error instanceof Error ? error.message : String(error)}`
        const id = answeredId(line)
        if (id === undefined) this.onerror?.(new Error(problem))
        else this.onmessage?.({ jsonrpc: "2.0", id, result: {} }, { malformed: line.slice(0, 300) } satisfies AnswerMalformed as MessageExtraInfo)
        continue
      }
      try {
        this.onmessage?.(message)
      } catch (error) {
        // A message its reader could not handle: reported, and the next ones still read.
        this.onerror?.(error instanceof Error ? error : new Error(String(error)))
      }
    }
  }

  private explainSpawnError(error: Error): Error {
    const cwd = this.options.cwd
    if ((error as NodeJS.ErrnoException).code === "ENOENT" && cwd !== undefined && !existsSync(cwd)) {
      return Object.assign(new Error(`spawn ${this.options.command}: working directory ${cwd} does not exist`), {
        code: "ENOENT",
        cause: error
      })
    }
    return error
  }

  private forceFinish(): void {
    if (this.finished) return
    const child = this.child
    child?.stdin.destroy()
    child?.stdout.destroy()
    child?.stderr.destroy()
    this.finish()
  }

  private finish(): void {
    if (this.finished) return
    this.finished = true
    this.stderr.push(this.decoder.end())
    this.stderr.end()
    this.lines.clear()
    for (const timer of this.timers) clearTimeout(timer)
    this.timers.clear()
    for (const wake of this.finishWaiters) wake()
    this.finishWaiters.clear()
    this.onclose?.()
  }

  private notifyExit(): void {
    for (const wake of this.exitWaiters) wake()
    this.exitWaiters.clear()
  }

  private later(ms: number, run: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer)
      run()
    }, ms)
    timer.unref()
    this.timers.add(timer)
  }

  private waitFor(waiters: Set<() => void>, ms: number, done?: () => boolean): Promise<boolean> {
    if (done?.() === true) return Promise.resolve(true)
    return new Promise<boolean>((resolve) => {
      const wake = (): void => {
        clearTimeout(timer)
        resolve(true)
      }
      const timer = setTimeout(() => {
        waiters.delete(wake)
        resolve(false)
      }, ms)
      waiters.add(wake)
    })
  }
}
