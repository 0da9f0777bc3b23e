package xsk

// GeneratorConfig configures OpenGenerator.
type GeneratorConfig struct {
	// Ifname is the interface, in the calling thread's network namespace.
	Ifname string
	// Queue is the queue the socket is bound to (its frames leave on the
	// interface's TX queue of that number).
	Queue int
	// Frames are the Ethernet frames to send, each 14..FrameSize bytes:
	// the TX frames of the UMEM hold them in turn (frame i of the UMEM
	// holds Frames[i%len(Frames)]), and they go out in the order the
	// frames come back from the kernel. They are copied at open.
	Frames [][]byte
	// FrameSize, NumFrames, RingSize and ZeroCopy are as in Config (the
	// same defaults; half the frames transmit, the other half are unused).
	FrameSize, NumFrames, RingSize int
	ZeroCopy                       bool
	// Batch is the most frames one Send puts on the TX ring, 1..RingSize;
	// 0 means the frames the kernel sends per wake-up in copy mode
	// (Socket.TxBudget).
	Batch int
}
