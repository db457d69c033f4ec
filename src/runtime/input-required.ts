/**
 * Calls held for their caller's input: the bridge from an upstream that asks mid-call (a 2025-era
 * server's `elicitation/create` or `sampling/createMessage`, a 2026-07-28 server's
 * `input_required`) to a caller that answers in rounds (a REST caller that opted in with
 * `accept_input_required`, as a modern MCP client answers `input_required`). A call is a tool call,
 * a resource read or a prompt (`HeldRun`: the store's own pipeline for it, with the held call's
 * relay). The call runs on as usual; when its upstream asks, the caller is answered at once with
 * the requests, keyed, and an opaque `request_state`; the upstream's request waits until the caller
 * retries the call with `input_responses` and that state, which answers it, and the caller then
 * waits for the call's end (or the next round).
 *
 * Bounded: at most `maxHeldCalls` calls wait for input at once, and a key's share of that (a
 * quarter: `keyShare`) for a caller with a key; an upstream request beyond that is declined, as it would be without the
 * opt-in. A held call lasts no longer than its own time-out (its upstream request keeps its
 * deadline); a call that ended after its caller was told `input_required` is kept for
 * `KEEP_ENDED_MS` for the retry that fetches its answer (at most as many of them, for the store and
 * for one key), then forgotten, and any other is forgotten when it ends. A state names
 * its call by 144 random bits and is only taken back by the same key, in the same scope, for the
 * same request (method and tool, URI or prompt).
 *
 * In replica mode (docs/replicas.md, "Held calls") a call is held by the replica the caller called
 * first, and its state also names that replica, sealed with the cluster's secret (an HMAC over the
 * replica's id and the random part): a retry that reaches another replica is checked there against
 * the seal, then carried to the holder (`HeldCallsReplica.carry`) and answered with the step the
 * holder gives, as if it had landed there. Only tool calls are carried: a read or a prompt held by
 * another replica is refused, with a message that says so.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"
import { mcpError, ProtocolErrorCode } from "../mcp/protocol-error.js"
import { Cause, Exit } from "effect"
import { ValidationError } from "../domain/errors.js"
import { log } from "../logging/log.js"
import type { CallProgress, UpstreamRequestRelay } from "../mcp/types.js"
import { keyShare } from "../domain/key-share.js"

/** An upstream's request as the caller sees it: the MCP request, method and params. */
export interface InputRequest {
  readonly method: string
  readonly params?: Record<string, unknown> | undefined
}

/** How an operation of the store ended (a tool call's, a read's, a prompt's exit). */
export type AnyExit = Exit.Exit<unknown, unknown>

/** Where a held call stands for its caller: ended (how, `A`), or waiting for answers to these requests. */
export type HeldStep<A extends AnyExit> =
  | { readonly _tag: "Ended"; readonly exit: A }
  | { readonly _tag: "InputRequired"; readonly state: string; readonly requests: Readonly<Record<string, InputRequest>> }

/**
 * What a held call runs: one operation of the store (a tool call, a resource read, a prompt) with
 * the held call's relay of its upstream's requests and its progress, cancelled by `signal`. Its
 * promise never rejects: how the operation ended, failures included, is its value (`A`).
 */
export type HeldRun<A extends AnyExit> = (hooks: { readonly relay: UpstreamRequestRelay; readonly onProgress: (progress: CallProgress) => void }, signal: AbortSignal) => Promise<A>

/**
 * Who may take a held call back: the scope, the caller's key (its digest) and what it asks
 * (`subject`: the method and its tool, URI or prompt, e.g. `tools/call fx__ask`).
 */
export interface HeldOwner {
  readonly scope: string
  readonly owner: string
  readonly subject: string
  /** The caller came with a key: it may hold its key's share (`keyShare`); callers without one (a store with no keys) share the whole cap. */
  readonly keyed: boolean
}

/** A caller's retry: the state it was given and its answers, by the keys it was shown. */
export interface HeldRetry {
  readonly state: string
  readonly responses: Readonly<Record<string, unknown>>
}

/** What a held call's step needs of the request that waits for it. */
export interface HeldTurnOptions {
  /** The call's progress while the request waits. */
  readonly onProgress?: ((progress: CallProgress) => void) | undefined
  /** The request went away: a call not waiting for it is cancelled. */
  readonly signal: AbortSignal
}

/**
 * Held calls in replica mode: this replica's id and the cluster's secret (states are sealed with
 * them), and the way to the replica that holds another's call.
 */
export interface HeldCallsReplica {
  readonly replicaId: string
  readonly secret: string
  /**
   * A tool call's retry whose call the replica `holder` holds, carried to it: the step it answers
   * (the call's exit), its ValidationError, or one saying the holder cannot be reached (gone, or
   * silent past a time-out).
   */
  carry(holder: string, retry: HeldRetry, owner: HeldOwner, options: HeldTurnOptions): Promise<HeldStep<AnyExit> | ValidationError>
}

/** How long the answer of a held call that ended is kept for its caller's retry. */
export const KEEP_ENDED_MS = 60_000
/** The prefix of a request state of one store (its format's version): `h1.<random>`. */
const PREFIX = "h1."
/** The prefix of a request state of a replica: `h2.<replica id, base64url>.<random>.<seal>`. */
const REPLICA_PREFIX = "h2."
/** Longest state read at all (a longer one names no call). */
const MAX_STATE_LENGTH = 512

/** The seal of a replica's state: an HMAC under the cluster's secret of the holder's id and the state's random part. */
const sealOf = (secret: string, holder: string, random: string): Buffer =>
  createHmac("sha256", secret).update(`mcp-store/held-call/v1\0${holder}\0${random}`).digest().subarray(0, 16)

/** A new state: random, and in replica mode naming this replica, sealed. */
const newState = (replica: HeldCallsReplica | undefined): string => {
  const random = randomBytes(18).toString("base64url")
  if (replica === undefined) return PREFIX + random
  const holder = replica.replicaId
  return `${REPLICA_PREFIX}${Buffer.from(holder).toString("base64url")}.${random}.${sealOf(replica.secret, holder, random).toString("base64url")}`
}

/**
 * The replica a state says holds its call when its seal is good (its id; `""` for a state of one
 * store), or undefined for a state this store or cluster did not make.
 */
const holderOf = (state: string, replica: HeldCallsReplica | undefined): string | undefined => {
  if (state.startsWith(PREFIX)) return ""
  if (replica === undefined || !state.startsWith(REPLICA_PREFIX) || state.length > MAX_STATE_LENGTH) return undefined
  const [holderPart, random, seal] = state.slice(REPLICA_PREFIX.length).split(".")
  if (holderPart === undefined || random === undefined || seal === undefined || state.split(".").length !== 4) return undefined
  const holder = Buffer.from(holderPart, "base64url").toString("utf8")
  const given = Buffer.from(seal, "base64url")
  const expected = sealOf(replica.secret, holder, random)
  return given.length === expected.length && timingSafeEqual(given, expected) ? holder : undefined
}

/** What a retry whose state names no call of this caller is answered (all alike, so a state tells nothing). */
const noSuchCall = (): ValidationError =>
  ValidationError.of([
    {
      field: "request_state",
      problem: "names no call waiting for this caller's input (unknown, expired, or made for another key, scope, tool, resource or prompt); send the request again without it"
    }
  ])

interface Asked {
  readonly request: InputRequest
  readonly answer: (result: Record<string, unknown>) => void
  /** The caller has seen it (in an `InputRequired` step). */
  shown: boolean
}

/** One call that may wait for its caller's input. */
class HeldCall<A extends AnyExit> {
  ended: { readonly exit: A } | undefined
  readonly #asked = new Map<string, Asked>()
  /**
   * Keys the caller was shown that wait no more (answered, or withdrawn by the upstream): a retry's
   * answer to one is ignored, as a retry cannot know the upstream withdrew it.
   */
  readonly #settled = new Set<string>()
  #next = 0
  /** The caller's steps that wait (each request of the caller that follows the call), all given the next one. */
  readonly #waiters = new Set<(step: HeldStep<A>) => void>()
  /** The caller was answered `input_required` at least once: it may come back for the call's end. */
  #toldInput = false
  /** The requests of the caller that follow the call now, with where each hears its progress. */
  readonly #followers = new Map<object, ((progress: CallProgress) => void) | undefined>()
  readonly cancel = new AbortController()

  constructor(
    readonly state: string,
    readonly owner: HeldOwner,
    run: HeldRun<A>,
    /** Why no more upstream request may be held (the store's cap, or its caller's), or undefined when one may. */
    private readonly mayHold: () => string | undefined,
    /** The requests the caller can answer (its capabilities: by method, and by params such as an elicitation's mode); others are declined. */
    private readonly accepts: (method: string, params?: Readonly<Record<string, unknown>>) => boolean,
    private readonly onEnd: (call: HeldCall<A>) => void
  ) {
    const onProgress = (p: CallProgress) => {
      for (const hear of this.#followers.values()) hear?.(p)
    }
    void run({ relay: this.relay, onProgress }, this.cancel.signal).then((exit) => {
      this.ended = { exit }
      this.#asked.clear()
      this.#wakeUp()
      this.onEnd(this)
    })
  }

  /** Whether the caller was answered `input_required` (and may come back with the state for the end). */
  get toldInput(): boolean {
    return this.#toldInput
  }

  /** Requests asked and not answered yet. */
  get waiting(): boolean {
    return this.#asked.size > 0
  }

  private readonly relay: UpstreamRequestRelay = (request, { signal }) => {
    if (!this.accepts(request.method, request.params)) {
      return Promise.reject(mcpError(ProtocolErrorCode.InvalidRequest, `mcp-store declined ${request.method}: the client that made this call did not declare the capability to answer it`))
    }
    // A call that waits already is counted; the session bounds the requests of one call.
    const full = this.#asked.size === 0 ? this.mayHold() : undefined
    if (full !== undefined) return Promise.reject(mcpError(ProtocolErrorCode.InvalidRequest, `mcp-store declined ${request.method}: ${full}`))
    return new Promise((resolve, reject) => {
      const key = `input_${++this.#next}`
      const drop = () => {
        if (this.#asked.get(key)?.shown === true) this.#settled.add(key)
        this.#asked.delete(key)
        reject(signal.reason)
      }
      signal.addEventListener("abort", drop, { once: true })
      this.#asked.set(key, {
        request: { method: request.method, ...(request.params === undefined ? {} : { params: request.params }) },
        answer: (result) => {
          signal.removeEventListener("abort", drop)
          this.#settled.add(key)
          this.#asked.delete(key)
          resolve(result)
        },
        shown: false
      })
      this.#wakeUp()
    })
  }

  /** Gives every step that waits the next one, when there is one. */
  #wakeUp(): void {
    if (this.#waiters.size === 0) return
    const step = this.#stepNow()
    if (step === undefined) return
    const waiters = [...this.#waiters]
    this.#waiters.clear()
    for (const wake of waiters) wake(step)
  }

  /** The call's end, or the requests waiting when the caller has not seen them all; undefined when there is nothing new. */
  #stepNow(): HeldStep<A> | undefined {
    if (this.ended !== undefined) return { _tag: "Ended", exit: this.ended.exit }
    if (![...this.#asked.values()].some((a) => !a.shown)) return undefined
    const requests: Record<string, InputRequest> = {}
    for (const [key, asked] of this.#asked) {
      asked.shown = true
      requests[key] = asked.request
    }
    this.#toldInput = true
    return { _tag: "InputRequired", state: this.state, requests }
  }

  /** A request of the caller follows the call (`who`), hearing its progress with `onProgress` until it stops following. */
  follow(who: object, onProgress: ((progress: CallProgress) => void) | undefined): void {
    this.#followers.set(who, onProgress)
  }

  /** The request `who` follows the call no more; how many still do. */
  unfollow(who: object): number {
    this.#followers.delete(who)
    return this.#followers.size
  }

  /**
   * The next step for the caller: the call's end, or the requests asked that it has not seen yet.
   * Every request that waits for it at once is given the same step.
   */
  step(): Promise<HeldStep<A>> {
    const now = this.#stepNow()
    if (now !== undefined) return Promise.resolve(now)
    return new Promise((resolve) => this.#waiters.add(resolve))
  }

  /**
   * The caller's answers, by the keys it was shown. Every request shown and still waiting must be
   * answered, and no request it was not shown: otherwise a ValidationError and nothing is answered.
   * An answer to a key shown that waits no more (answered already, or withdrawn by the upstream) is
   * ignored; the requests asked since the caller's last step are its next step. A call that has
   * ended takes no answer and refuses none: a retry sent again (its answer lost on the way) gets the
   * call's end.
   */
  answer(responses: Readonly<Record<string, unknown>>): ValidationError | undefined {
    if (this.ended !== undefined) return undefined
    const problems: Array<{ field: string; problem: string }> = []
    const given: Array<[Asked, Record<string, unknown>]> = []
    for (const [key, value] of Object.entries(responses)) {
      const asked = this.#asked.get(key)
      if (asked === undefined && this.#settled.has(key)) continue
      if (asked === undefined || !asked.shown) problems.push({ field: `input_responses.${key}`, problem: "answers no request of this call that is still waiting" })
      else if (typeof value !== "object" || value === null || Array.isArray(value)) problems.push({ field: `input_responses.${key}`, problem: "must be an object (the result of the request)" })
      else given.push([asked, value as Record<string, unknown>])
    }
    for (const [key, asked] of this.#asked) if (asked.shown && !(key in responses)) problems.push({ field: `input_responses.${key}`, problem: "is missing: every waiting request needs its answer" })
    if (problems.length > 0) return ValidationError.of(problems)
    for (const [asked, value] of given) asked.answer(value)
    return undefined
  }
}

/** The calls of a store that wait, or may come to wait, for their callers' input. */
export class HeldCalls {
  // Each call's `A` is that of its subject's method: a retry takes back only a call of its own subject.
  readonly #calls = new Map<string, HeldCall<any>>()
  /** The ended calls kept for their callers, oldest first, with the timers that forget them (cleared on close). */
  readonly #kept = new Map<string, NodeJS.Timeout>()
  #closed = false

  constructor(
    private readonly maxHeld: number,
    /** Replica mode: states name this replica, and a retry of another's call is carried there. */
    private readonly replica?: HeldCallsReplica | undefined
  ) {}

  /** Calls waiting for input now. */
  get waiting(): number {
    let n = 0
    for (const call of this.#calls.values()) if (call.waiting) n += 1
    return n
  }

  /** Why `owner` may hold no more calls waiting for input (the store's cap, or the caller's), or undefined when it may. */
  #full(owner: HeldOwner): string | undefined {
    let all = 0
    let mine = 0
    for (const call of this.#calls.values()) {
      if (!call.waiting) continue
      all += 1
      if (call.owner.owner === owner.owner) mine += 1
    }
    if (all >= this.maxHeld) return "too many calls are waiting for their callers' input"
    return owner.keyed && mine >= keyShare(this.maxHeld) ? `this caller already has ${mine} calls waiting for its input (a quarter of max_held_calls ${this.maxHeld})` : undefined
  }


  /**
   * One request's turn with a held call, whatever the face and the operation: a new call (`run`),
   * or with `retry` (the state and answers of a caller that was answered `input_required`) the one
   * it names, its answers given (a ValidationError changes nothing), here or on the replica that
   * holds it; then the call's next step. While the request waits, the call's progress goes to `onProgress`; a request that goes
   * away (`signal`) before the step cancels the call.
   */
  async turn<A extends AnyExit>(
    run: HeldRun<A>,
    owner: HeldOwner,
    options: HeldTurnOptions & {
      readonly retry?: HeldRetry | undefined
      /** The requests the caller can answer (its capabilities: by method and params); by default all. */
      readonly accepts?: ((method: string, params?: Readonly<Record<string, unknown>>) => boolean) | undefined
    }
  ): Promise<HeldStep<A> | ValidationError> {
    const { retry } = options
    if (retry === undefined) return this.#follow(this.#start(run, owner, options.accepts ?? (() => true)), options)
    const holder = holderOf(retry.state, this.replica)
    if (holder === undefined) return noSuchCall()
    if (holder !== "" && holder !== this.replica?.replicaId) {
      if (!owner.subject.startsWith("tools/call ")) {
        return ValidationError.of([{ field: "request_state", problem: "names a request held by another replica; only tool calls are carried between replicas: send the request again without it" }])
      }
      // A tool call's retry: the holder answers with the call's exit, the `A` of a tool call.
      return (await this.replica!.carry(holder, retry, owner, options)) as HeldStep<A> | ValidationError
    }
    return this.resume<A>(retry, owner, options)
  }

  /**
   * A retry of a call held here (from `turn`, or carried here by the replica it reached): the call
   * it names taken back by its owner, its answers given (a ValidationError changes nothing), then
   * its next step.
   */
  async resume<A extends AnyExit>(retry: HeldRetry, owner: HeldOwner, options: HeldTurnOptions): Promise<HeldStep<A> | ValidationError> {
    const call = this.#resume<A>(retry.state, owner)
    if (call instanceof ValidationError) return call
    const refused = call.answer(retry.responses)
    if (refused !== undefined) return refused
    const step = await this.#follow(call, options)
    // Cancelled (a request of its caller went away while it waited, or the store stopped): there is no
    // end to give, and an interruption is no answer a face can send.
    if (step._tag === "Ended" && Exit.isFailure(step.exit) && Cause.isInterruptedOnly(step.exit.cause)) {
      return ValidationError.of([{ field: "request_state", problem: "names a request that was cancelled (its caller went away while it waited, or the store stopped); send it again without the state" }])
    }
    return step
  }

  /** The next step of a held call, for the request that waits for it. */
  async #follow<A extends AnyExit>(held: HeldCall<A>, options: HeldTurnOptions): Promise<HeldStep<A>> {
    const { signal } = options
    const follower = {}
    held.follow(follower, options.onProgress)
    // The call is cancelled only when no request of its caller follows it any more.
    const abandon = () => {
      if (held.unfollow(follower) === 0) this.#abandon(held)
    }
    signal.addEventListener("abort", abandon, { once: true })
    try {
      return await held.step()
    } finally {
      held.unfollow(follower)
      signal.removeEventListener("abort", abandon)
    }
  }

  /** Starts a call whose upstream requests wait for its caller. */
  #start<A extends AnyExit>(run: HeldRun<A>, owner: HeldOwner, accepts: (method: string, params?: Readonly<Record<string, unknown>>) => boolean): HeldCall<A> {
    const call = new HeldCall(newState(this.replica), owner, run, () => this.#full(owner), accepts, (ended) => {
      // A call whose caller was never told input_required had its answer on the request that made it.
      if (this.#closed || !ended.toldInput) return void this.#calls.delete(ended.state)
      // Kept a while for a caller that was answered `input_required` and comes back for the end; at
      // most `maxHeld` of them and a key's share per keyed caller, the oldest forgotten first (the
      // caller's own first, so one caller cannot push out the others').
      const timer = setTimeout(() => this.#forget(ended.state), KEEP_ENDED_MS)
      timer.unref()
      this.#kept.set(ended.state, timer)
      if (owner.keyed) {
        const mine = [...this.#kept.keys()].filter((state) => this.#calls.get(state)?.owner.owner === owner.owner)
        if (mine.length > keyShare(this.maxHeld)) this.#forget(mine[0]!)
      }
      if (this.#kept.size > this.maxHeld) this.#forget(this.#kept.keys().next().value as string)
    })
    this.#calls.set(call.state, call)
    return call
  }

  /** Forgets an ended call kept for its caller. */
  #forget(state: string): void {
    clearTimeout(this.#kept.get(state))
    this.#kept.delete(state)
    this.#calls.delete(state)
  }

  /** Calls held now: running with a caller that may answer input, or ended and kept for their callers. */
  get size(): number {
    return this.#calls.size
  }

  /**
   * The held call a retry names, taken back by its owner; a ValidationError when the state is not
   * one (unknown, expired, another key's, scope's or subject's: all alike, so a state tells nothing).
   */
  #resume<A extends AnyExit>(state: string, owner: HeldOwner): HeldCall<A> | ValidationError {
    const call = this.#calls.get(state)
    if (call === undefined || call.owner.scope !== owner.scope || call.owner.owner !== owner.owner || call.owner.subject !== owner.subject) return noSuchCall()
    return call
  }

  /** The caller went away while its call was not waiting for it: the call is cancelled. */
  #abandon<A extends AnyExit>(call: HeldCall<A>): void {
    if (call.ended !== undefined) return
    const subject = call.owner.subject.slice(0, 200)
    log.info(`a held ${subject} waiting for its caller's input was cancelled: the caller went away`, { event: "held_call_abandoned", subject })
    call.cancel.abort()
  }

  /** Ends every held call (the store stops). */
  close(): void {
    this.#closed = true
    for (const call of this.#calls.values()) call.cancel.abort()
    this.#calls.clear()
    for (const timer of this.#kept.values()) clearTimeout(timer)
    this.#kept.clear()
  }
}
