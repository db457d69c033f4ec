/**
 * The rules of a Redis outage between replicas, apart from the requests that carry them
 * (src/cluster/cluster.ts asks and answers): what a replica that lost Redis concludes from the
 * others' answers, and the promises a replica gives when it does not reach Redis either. Pure, so
 * each case of the safety argument in docs/replicas.md has a test of its own.
 */

/** The answer to a `redis` request: `quietMs` with a no, how long the answering replica takes no lease from then. */
export interface RedisAnswer {
  readonly up: boolean
  readonly quietMs?: number | undefined
}

/** How one replica that was asked replied: an answer (null from a replica that did not understand), no answer in time, or a refused connection. */
export type Reply = { readonly kind: "answered"; readonly answer: RedisAnswer | null } | { readonly kind: "silent" } | { readonly kind: "refused" }

/**
 * What the answers say: an outage (every other replica promised not to take the leases named, for
 * at least `promisedMs`), a partition of this replica (another reaches Redis, or one vouched for
 * nothing), or no other replica to vouch (none known, or every one refuses connections).
 */
export type Verdict = "outage" | "partitioned" | "alone"

/** The conclusion of one question: settled with a verdict, or not (`missing` replicas may reach Redis and did not say). */
export type Conclusion =
  | { readonly settled: true; readonly verdict: Verdict; readonly promisedMs: number }
  | { readonly settled: false; readonly missing: number }

/**
 * The conclusion of a question to the `others` known replicas, of which those that said where they
 * listen were asked (`replies`, one each); the rest count as missing, since a replica that starts
 * may take leases before it can be asked. A replica that refuses connections takes no lease (one
 * stops taking them before its listener closes), so it is not waited for; one that did not answer
 * in time may still reach Redis, so while one is missing nothing is settled, unless another
 * already said it reaches Redis. An answer without a promise (a yes, or a replica of an earlier
 * version) vouches for nothing.
 */
export const conclude = (others: number, replies: ReadonlyArray<Reply>): Conclusion => {
  const promises = replies.flatMap((r) => (r.kind === "answered" ? [r.answer?.up === false && typeof r.answer.quietMs === "number" ? r.answer.quietMs : 0] : []))
  const missing = replies.filter((r) => r.kind === "silent").length + Math.max(0, others - replies.length)
  if (others === 0 || (promises.length === 0 && missing === 0)) return { settled: true, verdict: "alone", promisedMs: 0 }
  const reached = promises.some((p) => p === 0)
  if (!reached && missing > 0) return { settled: false, missing }
  const promisedMs = Math.min(...promises)
  return { settled: true, verdict: promisedMs > 0 ? "outage" : "partitioned", promisedMs }
}

/** The most leases promised one by one, in a question and in all; past it the promise covers every lease, so the promises stay small. */
export const MAX_NAMED_LEASES = 10_000

/**
 * The promises this replica gave to replicas that lost Redis, while it did not reach Redis either:
 * until when (epoch ms) it takes none of the leases each named (every lease, for an asker that
 * named none or too many).
 */
export class QuietPromises {
  readonly #byLease = new Map<string, number>()
  #all = 0

  /** A promise given for a question sent at `sent`: the leases named (undefined: all of them) until `until`; promises that ended before the question are forgotten. */
  give(leases: ReadonlyArray<string> | undefined, until: number, sent: number): void {
    for (const [label, at] of this.#byLease) if (at <= sent) this.#byLease.delete(label)
    if (leases === undefined || leases.length > MAX_NAMED_LEASES) this.#all = Math.max(this.#all, until)
    else for (const label of leases) this.#byLease.set(label, Math.max(this.#byLease.get(label) ?? 0, until))
    // Past the bound in all (askers naming other leases each time), the promises become one for every lease: more kept quiet, the safe side.
    if (this.#byLease.size > MAX_NAMED_LEASES) {
      for (const at of this.#byLease.values()) this.#all = Math.max(this.#all, at)
      this.#byLease.clear()
    }
  }

  /** Until when (epoch ms) this replica takes no `label` lease; 0 when it promised nothing for it. */
  until(label: string): number {
    return Math.max(this.#all, this.#byLease.get(label) ?? 0)
  }

  /** How many leases are promised one by one (the bound's test). */
  get named(): number {
    return this.#byLease.size
  }
}
