"""An activation stream that keeps each sent tensor alive beside its send until the send is done."""
