/**
 * Approvals across replicas (docs/approvals.md, "Replica mode"): a call waiting for its approval
 * waits on the replica whose pipeline runs it (the holder), which shares the approval's view in
 * Redis (hash `approvals`, field = approval id, value = the view, the holder's id and until when it
 * may wait) while it is pending, so `GET /for_store/approvals` lists it on every replica, and
 * announces each change on the pub/sub channel `approvals-changed`, so every replica's `/events`
 * shows it. A decision made on another replica is carried to the holder over the signed forwarding
 * route (`approval`, src/cluster/forward.ts) and applied there, digest check and approver's label
 * included (src/http/cluster-route.ts).
 *
 * Bounded: each replica shares at most its `max_approvals` (the views are those the list shows,
 * arguments already cut); an entry whose holder left the registry (a crash) is not listed, and one
 * whose time passed is removed by the replica that reads it; the hash expires when its newest
 * entry's time has passed. Every Redis command has the connection's time-out, and a decision carried to a
 * holder has `DECIDE_MS`.
 */
import type { ApprovalEvent, ApprovalsReplica, ApprovalView, RemoteDecision, SharedApproval } from "../runtime/approvals.js"
import { log } from "../logging/log.js"
import { McpRequestError } from "../mcp/types.js"
import { clusterKey } from "../redis/key-names.js"
import type { Cluster } from "./cluster.js"
import { NotDelivered } from "./forward.js"

/** How long a decision carried to its holder may take (ms). */
export const DECIDE_MS = 5000
/** What an entry may outlive its approval's time-out by before anyone drops it (ms): clocks differ a little. */
const GRACE_MS = 5000
/** A shared entry or event larger than this is not taken (characters of JSON): the views are cut already. */
const MAX_ENTRY_CHARS = 256 * 1024
/** The most entries one list reads (every replica's `max_approvals` together stays far below it). */
const MAX_LISTED = 10_000

/** An approval as the hash holds it. */
interface Entry {
  readonly view: ApprovalView
  readonly holder: string
  /** Epoch ms past which the entry is stale (its call timed out). */
  readonly until: number
}

const parse = <T>(text: string, what: string): T | undefined => {
  if (text.length > MAX_ENTRY_CHARS) {
    log.warn(`a shared ${what} is too large (${text.length} characters); not taken`, { event: "cluster_approvals_refused" })
    return undefined
  }
  try {
    const value = JSON.parse(text) as unknown
    return typeof value === "object" && value !== null ? (value as T) : undefined
  } catch {
    log.warn(`a shared ${what} is not JSON; not taken`, { event: "cluster_approvals_refused" })
    return undefined
  }
}

const isEntry = (e: Entry | undefined): e is Entry =>
  e !== undefined && typeof e.holder === "string" && typeof e.until === "number" && typeof e.view === "object" && e.view !== null && typeof e.view.approval_id === "string"

/** The approvals of a cluster, shared through its Redis and its forwarding route. */
export const sharedApprovals = (cluster: Cluster): ApprovalsReplica => {
  const client = cluster.connection.client
  const subscriber = cluster.connection.subscriber
  const hash = clusterKey(cluster.options.name, "approvals")
  const channel = clusterKey(cluster.options.name, "approvals-changed")
  const failed = (what: string) => (e: unknown) =>
    log.warn(`${what} (${e instanceof Error ? e.message : String(e)}): the other replicas may not see it`, { event: "cluster_approvals_failed" })

  /** Removes stale entries (best effort: the next reader tries again). */
  const drop = (ids: ReadonlyArray<string>): void => {
    if (ids.length > 0) void client.hDel(hash, [...ids]).catch(() => undefined)
  }

  return {
    replicaId: cluster.replicaId,

    put: (view, until) => {
      const entry: Entry = { view, holder: cluster.replicaId, until: until + GRACE_MS }
      // The hash lives as long as its newest entry may (NX: a new hash; GT: a longer wait than any so far).
      const ttl = Math.max(1000, until + GRACE_MS - Date.now())
      void client
        .multi()
        .hSet(hash, view.approval_id, JSON.stringify(entry))
        .pExpire(hash, ttl, "NX")
        .pExpire(hash, ttl, "GT")
        .exec()
        .catch(failed(`approval ${view.approval_id} could not be shared`))
    },

    remove: (id) => void client.hDel(hash, id).catch(failed(`the end of approval ${id} could not be shared`)),

    announce: (event) => {
      void client.publish(channel, JSON.stringify({ holder: cluster.replicaId, event })).catch(failed(`approval ${event.approval_id}'s change could not be announced`))
    },

    follow: (listener) => {
      let stopped = false
      const onMessage = (message: string) => {
        if (stopped) return
        const m = parse<{ holder?: unknown; event?: ApprovalEvent }>(message, "approval event")
        if (m === undefined || m.holder === cluster.replicaId || typeof m.event !== "object" || m.event === null || typeof m.event.approval_id !== "string") return
        listener(m.event)
      }
      void subscriber.subscribe(channel, onMessage).catch(failed("the cluster's approval events cannot be followed"))
      return () => {
        stopped = true
        void subscriber.unsubscribe(channel, onMessage).catch(() => undefined)
      }
    },

    others: async () => {
      const [fields, live] = await Promise.all([client.hGetAll(hash), cluster.replicas()])
      const alive = new Set(live.map((r) => r.id))
      const now = Date.now()
      const out: Array<SharedApproval> = []
      const stale: Array<string> = []
      for (const [id, json] of Object.entries(fields)) {
        const entry = parse<Entry>(json, `approval ${id}`)
        // A holder missing from the registry is not listed but not deleted either: it may be back from
        // a Redis outage (its registry entry renewed within ttl/3); its entries end at their `until`.
        if (!isEntry(entry) || entry.until < now) stale.push(id)
        else if (entry.holder !== cluster.replicaId && alive.has(entry.holder) && out.length < MAX_LISTED) out.push({ view: entry.view, holder: entry.holder })
      }
      drop(stale)
      return out
    },

    find: async (id) => {
      const json = await client.hGet(hash, id)
      if (json === null || json === undefined) return undefined
      const entry = parse<Entry>(json, `approval ${id}`)
      if (!isEntry(entry) || entry.until < Date.now()) {
        drop([id])
        return undefined
      }
      if (!(await cluster.alive(entry.holder))) return undefined
      return { view: entry.view, holder: entry.holder }
    },

    decideOn: async (holder, id, decision, by, digest) => {
      try {
        const answer = (await cluster.sendToReplica(holder, { op: "approval", field: "", approval: id, decision, by, digest, timeoutMs: DECIDE_MS }, {})) as RemoteDecision | null
        if (answer === null || typeof answer !== "object") return { gone: `replica ${holder} gave an answer that is not a decision` }
        return answer
      } catch (e) {
        if (e instanceof NotDelivered) return { gone: `replica ${holder}, whose call waits for it, has left the cluster` }
        // The request may have reached the holder, which may have applied it: not known to be gone.
        if (e instanceof McpRequestError && e.kind === "timeout") return { unknown: `replica ${holder}, whose call waits for it, did not answer within ${DECIDE_MS / 1000} s` }
        return { unknown: `replica ${holder}, whose call waits for it, did not answer (${(e as Error).message})` }
      }
    }
  }
}
