/** A small typed event emitter (browser and Node alike). */
export type Listener<T> = (value: T) => void;

export class Emitter<Events extends { [K in keyof Events]: unknown }> {
  private readonly listeners = new Map<keyof Events, Set<Listener<never>>>();

  /** Subscribes; returns the unsubscribe function. */
  on<K extends keyof Events>(event: K, fn: Listener<Events[K]>): () => void {
    let set = this.listeners.get(event);
    if (!set) {
      set = new Set();
      this.listeners.set(event, set);
    }
    set.add(fn as Listener<never>);
    return () => set.delete(fn as Listener<never>);
  }

  /** Subscribes for one event. */
  once<K extends keyof Events>(event: K, fn: Listener<Events[K]>): () => void {
    const off = this.on(event, (v) => {
      off();
      fn(v);
    });
    return off;
  }

  /** Calls every listener of `event`; a throwing listener does not stop the others. */
  emit<K extends keyof Events>(event: K, value: Events[K]): void {
    const set = this.listeners.get(event);
    if (!set) return;
    for (const fn of [...set]) {
      try {
        (fn as Listener<Events[K]>)(value);
      } catch (e) {
        console.error(`plaza: a "${String(event)}" listener threw`, e);
      }
    }
  }
}
