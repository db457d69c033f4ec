/**
 * The upstream tasks the store hands to its MCP clients (the tasks extension, 2026-07-28): a modern
 * client that declared the extension gets a task of the store's for a call its upstream answered
 * with a task handle, and follows it through the store (tasks/get, tasks/update, tasks/cancel,
 * relayed to the upstream by `relayTaskRequest` of src/runtime/calls.ts). The task's state is the upstream's; the store
 * keeps only what records the call once its end is seen (`TaskRelays`): the call is one record,
 * written when a relayed answer first shows the task ended (on this store, or, in replica mode, on
 * another replica, which tells this one), or when its time to live passes unseen, or when the store stops. Bounded: past `max` tasks followed at once, the store follows a
 * new task itself and answers its call's result (a client must take either).
 */
import { randomBytes } from "node:crypto"
import type { CallToolResult } from "@modelcontextprotocol/client"
import { log } from "../logging/log.js"
import { cutValue, DEFAULT_MAX_VALUE_BYTES, resultValue, toolErrorMessage, type Outcome, type RecordsBackend } from "../records/tool-records.js"
import type { TraceContext } from "../domain/trace-context.js"
import { scopeLabel, type Scope } from "../domain/service-definition.js"

/** Tasks followed at once by clients through the store (past it, the store follows new ones itself). */
const MAX_RELAYED_TASKS = 1000
/** The longest the store waits to see a task end (an upstream's `ttlMs` null or longer): a day. */
const MAX_TASK_LIFE_MS = 24 * 60 * 60 * 1000

/** The call a relayed task belongs to, as its record will name it. */
export interface RelayedCall {
  readonly scope: Scope
  readonly serviceName: string
  /** The tool's own name on its service. */
  readonly original: string
  readonly params: Record<string, unknown>
  readonly span: TraceContext
  /** performance.now() when the call began. */
  readonly started: number
}

interface Entry {
  readonly call: RelayedCall
  readonly timer: NodeJS.Timeout
}

/** How a task's end reads in a record, from the task as a relayed answer shows it (undefined: not ended). */
const endingOf = (task: Readonly<Record<string, unknown>>): { readonly outcome: Outcome; readonly result: unknown; readonly error: string | null } | undefined => {
  const message = typeof task["statusMessage"] === "string" ? task["statusMessage"] : undefined
  switch (task["status"]) {
    case "completed": {
      const result = (typeof task["result"] === "object" && task["result"] !== null ? task["result"] : {}) as CallToolResult
      if (result.isError === true) return { outcome: "tool_error", result: null, error: toolErrorMessage({ content: result.content ?? [] }) }
      return { outcome: "success", result: resultValue(result), error: null }
    }
    case "failed": {
      const error = task["error"] as { message?: unknown } | undefined
      return { outcome: "protocol_error", result: null, error: typeof error?.message === "string" ? error.message : (message ?? "the task failed") }
    }
    case "cancelled":
      return { outcome: "cancelled", result: null, error: message ?? "the task was cancelled" }
    default:
      return undefined
  }
}

/** Whether a task, as a relayed answer shows it, has ended (`completed`, `failed`, `cancelled`). */
export const taskEnded = (task: Readonly<Record<string, unknown>>): boolean => endingOf(task) !== undefined

/** The tasks handed to clients and not seen ended yet (see the module comment). */
export class TaskRelays {
  readonly #tasks = new Map<string, Entry>()

  constructor(
    private readonly records: RecordsBackend,
    readonly max: number = MAX_RELAYED_TASKS
  ) {}

  /** Whether another task can be followed by a client (else the store follows it itself). */
  get room(): boolean {
    return this.#tasks.size < this.max
  }

  /**
   * Starts following a task handed to a client: its id here (random, 128 bits), under which its
   * end is recorded. `ttlMs` is the upstream's time to live (null: unlimited), capped at a day.
   */
  follow(followed: RelayedCall, ttlMs: unknown): string {
    const id = randomBytes(16).toString("base64url")
    // Kept no larger than a record keeps them (1,000 tasks of large arguments must not hold gigabytes);
    // arguments cut here are recorded as the cut text.
    const params = cutValue(followed.params, DEFAULT_MAX_VALUE_BYTES)
    const call = params.truncated ? { ...followed, params: { truncated: params.value } } : followed
    const life = typeof ttlMs === "number" && ttlMs > 0 ? Math.min(ttlMs, MAX_TASK_LIFE_MS) : MAX_TASK_LIFE_MS
    const timer = setTimeout(() => this.#end(id, { outcome: "timeout", result: null, error: `the store saw no end of the task within its time to live (${Math.round(life / 1000)} s)` }), life)
    timer.unref()
    this.#tasks.set(id, { call, timer })
    return id
  }

  /** A relayed answer showed the task (`tasks/get`): if it ended, its call is recorded (once). */
  seen(id: string, task: Readonly<Record<string, unknown>>): void {
    if (!this.#tasks.has(id)) return
    const ending = endingOf(task)
    if (ending !== undefined) this.#end(id, ending)
  }

  /** The store stops: the calls of tasks not seen ended are recorded `interrupted` (their handles stay valid). */
  close(): void {
    for (const id of [...this.#tasks.keys()]) this.#end(id, { outcome: "interrupted", result: null, error: "the store stopped before the task's end was seen" })
  }

  #end(id: string, ending: { readonly outcome: Outcome; readonly result: unknown; readonly error: string | null }): void {
    const entry = this.#tasks.get(id)
    if (entry === undefined) return
    this.#tasks.delete(id)
    clearTimeout(entry.timer)
    const { scope, serviceName, original, params, span, started } = entry.call
    const label = scopeLabel(scope)
    log.info(`task of ${serviceName}/${original} in ${label === "store" ? "the store" : `agent '${label}'`} ended: ${ending.outcome}`, {
      event: "task_ended",
      scope: label,
      service: serviceName,
      tool: original,
      outcome: ending.outcome,
      trace_id: span.traceId
    })
    this.records
      .record({
        scope: scope.kind,
        agent_id: scope.kind === "agent" ? scope.agentId : null,
        service_name: serviceName,
        tool_name: original,
        params,
        result: ending.result,
        outcome: ending.outcome,
        error: ending.error,
        duration_ms: Math.round((performance.now() - started) * 100) / 100,
        trace_id: span.traceId,
        span_id: span.spanId
      })
      .written?.catch((e: unknown) => log.error(`a tool-call record could not be written: ${e instanceof Error ? e.message : String(e)}`, { event: "record_failed", trace_id: span.traceId }))
  }
}
